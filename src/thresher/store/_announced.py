"""Which ended service jobs and batches have been announced: their end hooks (webhooks,
alerts, a batch's events, the request buffer's settling) run once they end, and
`announced_at` records that they did.

A job's end and its announcement are two steps, so a server killed between them left
the job's webhook never sent. Now an ended job or batch whose `announced_at` is still
empty is found by the next look (`untold_jobs`, `untold_batches`) of any server on the
store, once it has been so for `grace` seconds (its own server announces it in well
under that), and its hooks run again. They are safe to run twice: every delivery is
recorded once per subject, event and URL, and the other hooks check before they act.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from thresher.store._batches import BatchStatus
from thresher.store._db import Database, now
from thresher.store._records import JobState

__all__ = ["Announcements"]

ENDED_JOBS = tuple(s.value for s in JobState if s.finished)
ENDED_BATCHES = tuple(s.value for s in BatchStatus if s.finished)
# A batch's end is the stamp of the status it ended in (see _batches.STAMPS).
BATCH_END = "COALESCE(completed_at, failed_at, expired_at, cancelled_at, created_at)"


@dataclass(frozen=True)
class Announcements:
    db: Database

    def untold_jobs(self, grace: float) -> list[str]:
        """Service jobs (those with a tenant) that ended at least `grace` seconds ago and
        were never announced, oldest first."""
        marks = ", ".join("?" for _ in ENDED_JOBS)
        rows = self.db.query(
            "SELECT id, finished_at FROM thresher_jobs WHERE announced_at IS NULL"
            f" AND tenant IS NOT NULL AND state IN ({marks}) ORDER BY created_at",
            ENDED_JOBS,
        )
        cutoff = time.time() - grace
        return [str(i) for i, ended in rows if not ended or _seconds(ended) <= cutoff]

    def untold_batches(self, grace: float) -> list[str]:
        """Batches that ended at least `grace` seconds ago and were never announced."""
        marks = ", ".join("?" for _ in ENDED_BATCHES)
        rows = self.db.query(
            f"SELECT id, {BATCH_END} FROM thresher_batches WHERE announced_at IS NULL"
            f" AND status IN ({marks}) ORDER BY id",
            ENDED_BATCHES,
        )
        cutoff = time.time() - grace
        return [str(i) for i, ended in rows if int(ended) <= cutoff]

    def job_told(self, job_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_jobs SET announced_at = ? WHERE id = ? AND announced_at IS NULL",
                (now(), job_id),
            )

    def batch_told(self, batch_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_batches SET announced_at = ?"
                " WHERE id = ? AND announced_at IS NULL",
                (int(time.time()), batch_id),
            )


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()
