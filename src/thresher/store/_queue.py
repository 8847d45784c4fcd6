"""The service's queue: jobs waiting to start (`queued`) or to resume (`preempted`), taken
by a scheduler, cancelled while they wait, and preempted ones put back.

A preempted job waits like a queued one, by priority then age, but only once its
coordinator has stopped: while it still holds its slot lease it is winding down, and
taking it again then would run two coordinators over one job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from thresher.store._db import Database, now
from thresher.store._leases import retry_lease
from thresher.store._owners import this_owner
from thresher.store._records import JobState, ShardState

WAITING = (JobState.QUEUED.value, JobState.PREEMPTED.value)


@dataclass(frozen=True)
class WaitingJob:
    id: str
    tenant: str | None
    priority: int
    state: JobState
    workers: int | None  # the worker slots its [run] asks for; None: as many as there are
    wait_reason: str | None = None  # as last recorded

    @property
    def resume(self) -> bool:
        """Whether it starts from its stored plan (it was preempted)."""
        return self.state == JobState.PREEMPTED


@dataclass(frozen=True)
class RunningJob:
    """A running job with a lease, as a candidate for preemption."""

    id: str
    tenant: str | None
    priority: int
    owner: str  # the lease's: the server running it
    acquired_at: str
    in_flight: int  # shards started and not committed: the work preempting it throws away


class JobQueue:
    """Every method is one transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def waiting(self, limit: int = 100, tenant: str | None = None) -> list[WaitingJob]:
        """Jobs that may start now, highest priority first, oldest first within one;
        only `tenant`'s when one is given."""
        mine = " AND tenant = ?" if tenant is not None else ""
        rows = self.db.query(
            "SELECT id, tenant, priority, state, spec, wait_reason FROM thresher_jobs"
            f" WHERE state IN (?, ?){mine} AND id NOT IN (SELECT job_id FROM thresher_leases)"
            " ORDER BY priority DESC, created_at ASC, id ASC LIMIT ?",
            (*WAITING, *([tenant] if tenant is not None else []), limit),
        )
        return [
            WaitingJob(str(r[0]), r[1], int(r[2] or 0), JobState(r[3]), _workers(r[4]), r[5])
            for r in rows
        ]

    def take(self, job_id: str) -> bool:
        """Mark a waiting job running under this process; False when someone else took
        it first (or it was cancelled)."""
        with self.db.transaction() as cur:
            taken = cur.changed(
                "UPDATE thresher_jobs SET state = ?, owner = ?, heartbeat_at = ?, message = NULL,"
                " wait_reason = NULL WHERE id = ? AND state IN (?, ?)",
                (JobState.RUNNING.value, this_owner(), now(), job_id, *WAITING),
            )
        return taken > 0

    def note_wait(self, job_id: str, reason: str | None) -> None:
        """Record why a waiting job has not started (which limit), for listings."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_jobs SET wait_reason = ? WHERE id = ? AND state IN (?, ?)",
                (reason, job_id, *WAITING),
            )

    def wait_reason(self, job_id: str) -> str | None:
        rows = self.db.query("SELECT wait_reason FROM thresher_jobs WHERE id = ?", (job_id,))
        return rows[0][0] if rows else None

    def preempt(self, job_id: str, message: str) -> bool:
        """Ask a running job to stop at its next heartbeat and wait to be resumed; False
        when it is no longer running."""
        with self.db.transaction() as cur:
            changed = cur.changed(
                "UPDATE thresher_jobs SET state = ?, message = ?, wait_reason = ?"
                " WHERE id = ? AND state = ?",
                (JobState.PREEMPTED.value, message, message, job_id, JobState.RUNNING.value),
            )
        return changed > 0

    def requeue(self, job_id: str, reason: str) -> None:
        """Put a job this server claimed but cannot run now back in the queue, to resume."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_jobs SET state = ?, wait_reason = ? WHERE id = ? AND state = ?",
                (JobState.PREEMPTED.value, reason, job_id, JobState.RUNNING.value),
            )

    def running_with_leases(self) -> list[RunningJob]:
        """Running jobs that hold a lease, with what preempting each would throw away."""
        rows = self.db.query(
            "SELECT j.id, j.tenant, j.priority, l.owner, l.acquired_at,"
            " (SELECT COUNT(*) FROM thresher_shards s WHERE s.job_id = j.id AND s.state = ?)"
            " FROM thresher_jobs j JOIN thresher_leases l ON l.job_id = j.id WHERE j.state = ?",
            (ShardState.RUNNING.value, JobState.RUNNING.value),
        )
        return [
            RunningJob(str(r[0]), r[1], int(r[2] or 0), str(r[3]), str(r[4]), int(r[5]))
            for r in rows
        ]

    def stopping(self) -> list[str]:
        """Preempted jobs whose coordinator has not stopped yet (they hold their lease)."""
        rows = self.db.query(
            "SELECT j.id FROM thresher_jobs j JOIN thresher_leases l ON l.job_id = j.id"
            " WHERE j.state = ?",
            (JobState.PREEMPTED.value,),
        )
        return [str(r[0]) for r in rows]

    def reopen(self, job_id: str, reason: str) -> bool:
        """Put a failed or cancelled job whose coordinator is gone and that no retry round
        is starting on (no lease of either) back in the queue: to finish from its stored
        plan, committed shards kept (`preempted`), or from the start when it never planned
        (`queued`). Its end is forgotten, so it ends (and is announced) again. False when
        the job is in no such state."""
        with self.db.transaction() as cur:
            changed = cur.changed(
                "UPDATE thresher_jobs SET state = CASE WHEN shard_count > 0 THEN ? ELSE ? END,"
                " finished_at = NULL, message = NULL, announced_at = NULL, wait_reason = ?"
                " WHERE id = ? AND state IN (?, ?)"
                " AND NOT EXISTS (SELECT 1 FROM thresher_leases WHERE job_id IN (?, ?))",
                (
                    JobState.PREEMPTED.value,
                    JobState.QUEUED.value,
                    reason,
                    job_id,
                    JobState.FAILED.value,
                    JobState.CANCELLED.value,
                    job_id,
                    retry_lease(job_id),
                ),
            )
        return changed > 0

    def cancel_if_queued(self, job_id: str) -> bool:
        """Cancel the job if it is waiting — queued, or preempted with its coordinator gone
        (no lease) — atomically against the scheduler's claim."""
        with self.db.transaction() as cur:
            changed = cur.changed(
                "UPDATE thresher_jobs SET state = ?, finished_at = ?, message = ?,"
                " wait_reason = NULL"
                " WHERE id = ? AND state IN (?, ?)"
                " AND id NOT IN (SELECT job_id FROM thresher_leases)",
                (
                    JobState.CANCELLED.value,
                    now(),
                    "cancelled by request",
                    job_id,
                    JobState.QUEUED.value,
                    JobState.PREEMPTED.value,
                ),
            )
        return changed > 0

    def running_service_jobs(self) -> list[str]:
        """Service jobs (with a tenant) in state running, by priority then age."""
        rows = self.db.query(
            "SELECT id FROM thresher_jobs WHERE state = ? AND tenant IS NOT NULL"
            " ORDER BY priority DESC, created_at ASC",
            (JobState.RUNNING.value,),
        )
        return [str(r[0]) for r in rows]

    def waiting_by_priority(self, tenant: str | None = None) -> dict[int, int]:
        """How many jobs wait (queued or preempted) at each priority: the tenant's, or every
        job's with None."""
        mine = " AND tenant = ?" if tenant is not None else ""
        rows = self.db.query(
            f"SELECT priority, COUNT(*) FROM thresher_jobs WHERE state IN (?, ?){mine}"
            " GROUP BY priority ORDER BY priority DESC",
            (*WAITING, *([] if tenant is None else [tenant])),
        )
        return {int(priority): int(count) for priority, count in rows}


def _workers(spec: str) -> int | None:
    workers = json.loads(spec).get("run", {}).get("workers")
    return int(workers) if workers is not None else None
