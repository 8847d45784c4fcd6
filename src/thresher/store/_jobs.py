"""The job store: jobs, their frozen plans, shard states, attempts and counts.

Only the coordinating process writes here. A shard is marked `done` only after its part is
committed to the sink, so after any crash the store never claims more than the sink holds;
the sink's own commit is idempotent, so redoing a shard the store does not know is done
never writes it twice.
"""

from __future__ import annotations

import json
from typing import Any

from thresher.spec import JobSpec
from thresher.store._db import Database, IdempotencyConflict, StoreError, now
from thresher.store._owners import DEFAULT_OWNER_TIMEOUT, this_owner
from thresher.store._records import (
    AttemptOutcome,
    JobRecord,
    JobState,
    ShardRecord,
    ShardState,
    Totals,
)
from thresher.store._schema import expect_current, migrate
from thresher.store._tables import Tables


class Store(Tables):
    """Jobs and shards in a Database. Every method is one transaction; every other table
    is an attribute (`store.batches`, `store.ticks`, ...: `_tables.py`).

    `owner` is whom the jobs this store starts or resumes are recorded under: this
    process, or the server a service job's coordinator runs for (`_owners.py`)."""

    def __init__(
        self,
        db: Database,
        owner: str | None = None,
        owner_timeout: float = DEFAULT_OWNER_TIMEOUT,
        migrating: bool = True,
    ) -> None:
        if migrating:
            migrate(db)
        else:
            expect_current(db)
        super().__init__(db, owner_timeout)
        self.owner = owner or this_owner()

    @property
    def url(self) -> str:
        return self.db.url

    def create_job(self, job_id: str, name: str, spec: JobSpec, plan: dict[str, Any]) -> None:
        shard_count = len(plan["shards"])
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO thresher_jobs (id, name, state, spec, plan, shard_count, created_at,"
                " owner, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    name,
                    JobState.RUNNING.value,
                    spec.model_dump_json(),
                    json.dumps(plan),
                    shard_count,
                    now(),
                    self.owner,
                    now(),
                ),
            )
            for index in range(shard_count):
                cur.execute(
                    "INSERT INTO thresher_shards (job_id, idx, state) VALUES (?, ?, ?)",
                    (job_id, index, ShardState.PENDING.value),
                )

    def queue_job(
        self,
        job_id: str,
        spec: JobSpec,
        tenant: str | None = None,
        key: str | None = None,
        request_sha256: str | None = None,
    ) -> str:
        """Record a job to run later (the service's queue); its plan comes when it starts.
        With an idempotency `key`, a second submission of the tenant returns the first
        job's id instead of queueing another — unless both carry a `request_sha256` and
        they differ: IdempotencyConflict, as the key was reused for another request."""
        name, priority = spec.job.name, spec.job.priority
        with self.db.transaction() as cur:
            if key is not None:
                found = cur.execute(
                    "SELECT id, request_sha256 FROM thresher_jobs WHERE tenant IS ?"
                    " AND idempotency_key = ?"
                    if self.db.dialect == "sqlite"
                    else "SELECT id, request_sha256 FROM thresher_jobs"
                    " WHERE tenant IS NOT DISTINCT FROM ? AND idempotency_key = ?",
                    (tenant, key),
                ).fetchone()
                if found and None not in (found[1], request_sha256) and found[1] != request_sha256:
                    raise IdempotencyConflict(f"key {key!r} was used for job {found[0]}")
                if found:
                    return str(found[0])
            cur.execute(
                "INSERT INTO thresher_jobs (id, name, state, spec, plan, shard_count, created_at,"
                " tenant, priority, idempotency_key, request_sha256)"
                " VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?)",
                (job_id, name, JobState.QUEUED.value, spec.model_dump_json(), "{}", now(), tenant,
                 priority, key, request_sha256),
            )  # fmt: skip
        return job_id

    def claim_next_queued(self) -> JobRecord | None:
        """The queued job to run next — highest `job.priority` first, oldest first within a
        priority — marked running by this process, or None."""
        while True:
            rows = self.db.query(
                "SELECT id FROM thresher_jobs WHERE state = ?"
                " ORDER BY priority DESC, created_at ASC LIMIT 1",
                (JobState.QUEUED.value,),
            )
            if not rows:
                return None
            with self.db.transaction() as cur:
                taken = cur.changed(
                    "UPDATE thresher_jobs SET state = ?, owner = ?, heartbeat_at = ?"
                    " WHERE id = ? AND state = ?",
                    (
                        JobState.RUNNING.value,
                        self.owner,
                        now(),
                        rows[0][0],
                        JobState.QUEUED.value,
                    ),
                )
            if taken:
                return self.job(str(rows[0][0]))

    def set_plan(self, job_id: str, plan: dict[str, Any]) -> None:
        """Freeze the plan of a job that was queued without one, and add its shards. A job
        cancelled or preempted while it was being planned stays so (its loop then stops)."""
        shard_count = len(plan["shards"])
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_jobs SET plan = ?, shard_count = ?, owner = ?, heartbeat_at = ?,"
                " state = CASE WHEN state IN (?, ?) THEN state ELSE ? END WHERE id = ?",
                (
                    json.dumps(plan),
                    shard_count,
                    self.owner,
                    now(),
                    JobState.CANCELLED.value,
                    JobState.PREEMPTED.value,
                    JobState.RUNNING.value,
                    job_id,
                ),
            )
            for index in range(shard_count):
                cur.execute(
                    "INSERT INTO thresher_shards (job_id, idx, state) VALUES (?, ?, ?)",
                    (job_id, index, ShardState.PENDING.value),
                )

    def job(self, job_id: str) -> JobRecord:
        rows = self.db.query(f"SELECT {_JOB_COLUMNS} FROM thresher_jobs WHERE id = ?", (job_id,))
        if not rows:
            raise StoreError(f"no job {job_id!r} in the store at {self.url}")
        return _job_record(rows[0])

    def jobs(self, limit: int = 20) -> list[JobRecord]:
        rows = self.db.query(
            f"SELECT {_JOB_COLUMNS} FROM thresher_jobs ORDER BY created_at DESC LIMIT ?", (limit,)
        )
        return [_job_record(r) for r in rows]

    def manifests_of(self, model_uri: str, limit: int, among: int = 500) -> list[dict[str, Any]]:
        """The manifests of the latest `limit` succeeded jobs, of the store's latest `among`,
        that may have run the model at `model_uri` (the text search is loose: check the
        manifest's `model`). Only the latest are searched: a store of a busy server holds
        many thousands of manifests."""
        pattern = f"%{json.dumps(model_uri)}%"
        rows = self.db.query(
            "SELECT manifest FROM thresher_jobs WHERE id IN"
            " (SELECT id FROM thresher_jobs ORDER BY created_at DESC LIMIT ?)"
            " AND state = ? AND manifest LIKE ? ORDER BY finished_at DESC LIMIT ?",
            (among, JobState.SUCCEEDED.value, pattern, limit),
        )
        return [json.loads(row[0]) for row in rows if row[0]]

    def shards(self, job_id: str) -> list[ShardRecord]:
        rows = self.db.query(
            "SELECT idx, state, attempts, rows_in, rows_out, rows_error, seconds, error"
            " FROM thresher_shards WHERE job_id = ? ORDER BY idx",
            (job_id,),
        )
        return [
            ShardRecord(
                r[0], ShardState(r[1]), r[2], r[3] or 0, r[4] or 0, r[5] or 0, r[6] or 0.0, r[7]
            )
            for r in rows
        ]

    def claim(self, job_id: str, force: bool = False, finished_ok: bool = False) -> JobRecord:
        """Make this process the job's coordinator (to resume it, or with `finished_ok` to
        retry its failed rows). Refused while another owner that lives (`_owners.py`)
        coordinates it, unless forced."""
        job = self.job(job_id)
        if job.state == JobState.SUCCEEDED and not finished_ok:
            raise StoreError(f"job {job_id} already succeeded; nothing to resume")
        if job.state.awaiting_decision or job.state == JobState.REJECTED:
            raise StoreError(
                f"job {job_id} is {job.state.value} by its publish gate; `thresher approve`"
                " publishes a held job, `thresher reject` discards it"
            )
        if job.state == JobState.RUNNING and not force and self.owners.alive(job.owner):
            raise StoreError(
                f"job {job_id} is being run by {job.owner}; wait for it, cancel it, "
                "or resume with --force if that process is gone"
            )
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_jobs SET state = ?, owner = ?, heartbeat_at = ?,"
                " finished_at = NULL, message = NULL WHERE id = ?",
                (JobState.RUNNING.value, self.owner, now(), job_id),
            )
        return self.job(job_id)

    def take_over(self, job_id: str, dead_owner: str | None) -> bool:
        """Make this store's owner the coordinator of a job still `running` under
        `dead_owner` (judged dead); False when someone took it first (one conditional
        update: of servers sharing the store, one wins) or it is no longer running."""
        with self.db.transaction() as cur:
            won = cur.changed(
                "UPDATE thresher_jobs SET owner = ?, heartbeat_at = ?"
                " WHERE id = ? AND state = ? AND COALESCE(owner, '') = ?",
                (self.owner, now(), job_id, JobState.RUNNING.value, dead_owner or ""),
            )
        return won > 0

    def heartbeat(self, job_id: str) -> JobState:
        """Note that the coordinator is alive; returns the job's state (to see a cancel)."""
        with self.db.transaction() as cur:
            cur.execute("UPDATE thresher_jobs SET heartbeat_at = ? WHERE id = ?", (now(), job_id))
            row = cur.execute("SELECT state FROM thresher_jobs WHERE id = ?", (job_id,)).fetchone()
        return JobState(row[0]) if row else JobState.CANCELLED

    def attempt_started(self, job_id: str, index: int, attempt: str, number: int) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_shards SET state = ?, attempts = attempts + 1"
                " WHERE job_id = ? AND idx = ?",
                (ShardState.RUNNING.value, job_id, index),
            )
            cur.execute(
                "INSERT INTO thresher_attempts (job_id, idx, attempt, number, started_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (job_id, index, attempt, number, now()),
            )

    def shard_done(
        self,
        job_id: str,
        index: int,
        attempt: str,
        counts: tuple[int, int, int],
        seconds: float,
        *,
        profile: str | None = None,
    ) -> None:
        """Record a committed shard, with its profile (JSON): call only after the sink
        committed its part. One transaction, so the profile counts exactly once."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_shards SET state = ?, rows_in = ?, rows_out = ?, rows_error = ?,"
                " seconds = ?, error = NULL, profile = ? WHERE job_id = ? AND idx = ?",
                (ShardState.DONE.value, *counts, seconds, profile, job_id, index),
            )
            self._end_attempt(cur, job_id, attempt, AttemptOutcome.DONE, None)

    def attempt_failed(
        self, job_id: str, index: int, attempt: str, message: str, final: bool
    ) -> None:
        message = bounded(message) or ""
        with self.db.transaction() as cur:
            if final:
                cur.execute(
                    "UPDATE thresher_shards SET state = ?, error = ? WHERE job_id = ? AND idx = ?",
                    (ShardState.FAILED.value, message, job_id, index),
                )
            self._end_attempt(cur, job_id, attempt, AttemptOutcome.FAILED, message)

    def finish(
        self, job_id: str, state: JobState, manifest: dict[str, Any] | None, message: str | None
    ) -> None:
        message = bounded(message)
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_jobs SET state = ?, finished_at = ?, manifest = ?, message = ?"
                " WHERE id = ? AND state != ?",
                (
                    state.value,
                    now(),
                    json.dumps(manifest) if manifest else None,
                    message,
                    job_id,
                    JobState.CANCELLED.value,
                ),
            )

    def record_crash(self, job_id: str) -> int:
        """Count one death of the job's coordinator process; returns the count so far."""
        with self.db.transaction() as cur:
            row = cur.execute(
                "UPDATE thresher_jobs SET crashes = crashes + 1 WHERE id = ? RETURNING crashes",
                (job_id,),
            ).fetchone()
        return int(row[0]) if row else 0

    def request_cancel(self, job_id: str) -> JobState:
        """Ask a job to stop; its coordinator sees it within a second. Returns the state
        the job is left in (a finished job stays as it was). The state is guarded in the
        write itself: a job that finished after any earlier look keeps its end."""
        self.job(job_id)  # a StoreError naming the store for an unknown id
        # A held job is decided by `approve` or `reject`, not cancelled.
        ended = tuple(s.value for s in JobState if s.finished or s.awaiting_decision)
        marks = ", ".join("?" for _ in ended)
        with self.db.transaction() as cur:
            row = cur.execute(
                "UPDATE thresher_jobs SET state = ?, finished_at = ?, message = ?"
                f" WHERE id = ? AND state NOT IN ({marks}) RETURNING state",
                (JobState.CANCELLED.value, now(), "cancelled by request", job_id, *ended),
            ).fetchone()
        return JobState.CANCELLED if row else self.job(job_id).state

    def totals(self, job_id: str) -> Totals:
        row = self.db.query(
            f"SELECT COUNT(CASE WHEN state = '{ShardState.DONE}' THEN 1 END),"
            f" COUNT(CASE WHEN state = '{ShardState.FAILED}' THEN 1 END),"
            " COALESCE(SUM(rows_in), 0), COALESCE(SUM(rows_out), 0), COALESCE(SUM(rows_error), 0)"
            " FROM thresher_shards WHERE job_id = ?",
            (job_id,),
        )[0]
        return Totals(*(int(v) for v in row))

    def _end_attempt(
        self, cur: Any, job_id: str, attempt: str, outcome: AttemptOutcome, message: str | None
    ) -> None:
        cur.execute(
            "UPDATE thresher_attempts SET finished_at = ?, outcome = ?, message = ?"
            " WHERE job_id = ? AND attempt = ?",
            (now(), outcome.value, message, job_id, attempt),
        )


_JOB_COLUMNS = (
    "id, name, state, spec, plan, shard_count, created_at, finished_at, message, owner, manifest,"
    " tenant, priority, wait_reason"
)


def _job_record(row: tuple[Any, ...]) -> JobRecord:
    return JobRecord(
        id=row[0],
        name=row[1],
        state=JobState(row[2]),
        spec=JobSpec.model_validate_json(row[3]),
        plan=json.loads(row[4]),
        shard_count=row[5],
        created_at=row[6],
        finished_at=row[7],
        message=row[8],
        owner=row[9],
        manifest=json.loads(row[10]) if row[10] else None,
        tenant=row[11],
        priority=int(row[12] or 0),
        wait_reason=row[13] if JobState(row[2]).waiting else None,
    )


# A stored job message is cut at this length: every job listing returns it.
MAX_MESSAGE = 4000


def bounded(message: str | None) -> str | None:
    """`message`, cut to MAX_MESSAGE characters with a note of how much was left out."""
    if message is None or len(message) <= MAX_MESSAGE:
        return message
    return f"{message[:MAX_MESSAGE]} … ({len(message) - MAX_MESSAGE:,} more characters)"
