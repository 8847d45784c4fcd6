"""The publish gate's decisions about held jobs, each one conditional write.

A held job moves on only by a decision (`approve` or `reject`), and a decision is recorded
before it acts: `held -> approved` before the publish, `held -> rejected` before the
staged output is discarded. Each transition is guarded by the state it leaves, so two
deciders racing (two `thresher approve`, or an approve beside a reject) cannot both win,
and an interrupted decision is finished by running the same command again.
"""

from __future__ import annotations

from dataclasses import dataclass

from thresher.store._db import Database, now
from thresher.store._records import JobState

__all__ = ["Decisions"]


@dataclass(frozen=True)
class Decisions:
    db: Database

    def decide(self, job_id: str, leaving: JobState, to: JobState) -> bool:
        """Move job `job_id` from `leaving` to `to`; False when it was not in `leaving`
        (someone decided first, or it never was held)."""
        with self.db.transaction() as cur:
            won = cur.changed(
                "UPDATE thresher_jobs SET state = ?, finished_at = ? WHERE id = ? AND state = ?",
                (to.value, now(), job_id, leaving.value),
            )
        return won > 0
