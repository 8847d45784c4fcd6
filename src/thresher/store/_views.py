"""Read-only views of the job tables the service and the monitor show: a tenant's jobs
page by page, the newest succeeded run of a name, the metrics' counts, the rows a tenant's
jobs read (its daily quota)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from thresher.store._db import Database
from thresher.store._records import JobRecord, JobState, ShardState


@dataclass(frozen=True)
class JobViews:
    """Queries over `thresher_jobs` and its shards that change nothing (`store.views`)."""

    db: Database

    def tenant_job_ids(
        self,
        tenant: str,
        limit: int,
        after: JobRecord | None,
        state: str | None = None,
        name: str = "",
    ) -> list[str]:
        """Up to `limit` of the tenant's job ids, newest first, after job `after`; only
        those in `state` and whose name holds `name` (any case), when given."""
        sql = "SELECT id FROM thresher_jobs WHERE tenant = ?"
        params: list[Any] = [tenant]
        if state is not None:
            sql += " AND state = ?"
            params.append(state)
        if name:
            pattern = name.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            sql += " AND LOWER(name) LIKE ? ESCAPE '\\'"
            params.append(f"%{pattern}%")
        if after is not None:
            sql += " AND (created_at < ? OR (created_at = ? AND id < ?))"
            params += [after.created_at, after.created_at, after.id]
        rows = self.db.query(f"{sql} ORDER BY created_at DESC, id DESC LIMIT ?", [*params, limit])
        return [str(r[0]) for r in rows]

    def latest_succeeded(
        self, name: str, tenant: str | None = None, before: JobRecord | None = None
    ) -> str | None:
        """The id of the newest succeeded job named `name` — of `tenant` when given, of any
        otherwise — or None: what "last night's run of `nightly`" means. With `before`, the
        newest that started before that job (the run before it)."""
        sql = "SELECT id FROM thresher_jobs WHERE name = ? AND state = ?"
        params: list[Any] = [name, JobState.SUCCEEDED.value]
        if tenant is not None:
            sql += " AND tenant = ?"
            params.append(tenant)
        if before is not None:
            sql += " AND id <> ? AND created_at <= ?"
            params += [before.id, before.created_at]
        rows = self.db.query(f"{sql} ORDER BY created_at DESC, id DESC LIMIT 1", params)
        return str(rows[0][0]) if rows else None

    def previous_run(self, job: JobRecord) -> str | None:
        """The run before `job`, what the publish gate compares it with: the newest
        succeeded job created before it of the same schedule when it is a schedule's
        (each tick's job has a name of its own), else of the same name; of its tenant."""
        schedule = job.spec.job.schedule
        if schedule is None:
            return self.latest_succeeded(job.name, job.tenant, job)
        sql = "SELECT id, spec FROM thresher_jobs WHERE state = ? AND spec LIKE ?"
        sql += " AND id <> ? AND created_at <= ?"
        pattern = f"%{json.dumps(schedule, ensure_ascii=False)}%"
        params: list[Any] = [JobState.SUCCEEDED.value, pattern, job.id, job.created_at]
        if job.tenant is not None:
            sql += " AND tenant = ?"
            params.append(job.tenant)
        for job_id, spec in self.db.query(f"{sql} ORDER BY created_at DESC, id DESC", params):
            if json.loads(spec).get("job", {}).get("schedule") == schedule:
                return str(job_id)
        return None

    def job_counts(self, tenant: str | None = None) -> dict[str, int]:
        """How many jobs are in each state: the tenant's, or every job's with None."""
        mine = " WHERE tenant = ?" if tenant is not None else ""
        rows = self.db.query(
            f"SELECT state, COUNT(*) FROM thresher_jobs{mine} GROUP BY state", _as_params(tenant)
        )
        return {str(state): int(count) for state, count in rows}

    def job_counts_by_tenant(self, tenant: str | None = None) -> dict[tuple[str, str], int]:
        """How many jobs each tenant has in each state, by (tenant, state) (`""`: a job
        of no tenant, run from the command line): the tenant's, or every tenant's."""
        mine = " WHERE tenant = ?" if tenant is not None else ""
        rows = self.db.query(
            f"SELECT COALESCE(tenant, ''), state, COUNT(*) FROM thresher_jobs{mine}"
            " GROUP BY COALESCE(tenant, ''), state",
            _as_params(tenant),
        )
        return {(str(t), str(state)): int(count) for t, state, count in rows}

    def done_row_totals(self, tenant: str | None = None) -> dict[str, tuple[int, int, int]]:
        """Rows in, out and to error files of every committed shard, by tenant: the
        tenant's jobs (every tenant's with None)."""
        mine = " AND j.tenant = ?" if tenant is not None else ""
        rows = self.db.query(
            "SELECT COALESCE(j.tenant, ''), COALESCE(SUM(s.rows_in), 0),"
            " COALESCE(SUM(s.rows_out), 0), COALESCE(SUM(s.rows_error), 0)"
            " FROM thresher_shards s JOIN thresher_jobs j ON j.id = s.job_id"
            f" WHERE s.state = ?{mine} GROUP BY COALESCE(j.tenant, '')",
            (ShardState.DONE.value, *_as_params(tenant)),
        )
        return {str(t): (int(a), int(b), int(c)) for t, a, b, c in rows}

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        """Every attempt at the job's shards, in the order they started: `index` (the
        shard), `number`, `started_at`, `finished_at`, `outcome` (done, failed, or None
        while running) and `message` (why it failed)."""
        rows = self.db.query(
            "SELECT idx, number, started_at, finished_at, outcome, message"
            " FROM thresher_attempts WHERE job_id = ? ORDER BY started_at, idx, number",
            (job_id,),
        )
        keys = ("index", "number", "started_at", "finished_at", "outcome", "message")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def running_job_progress(self, tenant: str | None = None) -> list[tuple[str, str, str, int]]:
        """(job id, tenant, first attempt's start, rows of its committed shards) of each
        running job of the tenant (of every tenant with None)."""
        mine = " AND j.tenant = ?" if tenant is not None else ""
        rows = self.db.query(
            "SELECT j.id, COALESCE(j.tenant, ''), MIN(a.started_at),"
            " (SELECT COALESCE(SUM(s.rows_in), 0) FROM thresher_shards s"
            "  WHERE s.job_id = j.id AND s.state = ?)"
            " FROM thresher_jobs j JOIN thresher_attempts a ON a.job_id = j.id"
            f" WHERE j.state = ?{mine} GROUP BY j.id, j.tenant",
            (ShardState.DONE.value, JobState.RUNNING.value, *_as_params(tenant)),
        )
        return [(str(j), str(t), str(started), int(n)) for j, t, started, n in rows]

    def shard_seconds(
        self, bounds: tuple[float, ...], tenant: str | None = None
    ) -> dict[str, tuple[list[int], int, float]]:
        """How long committed shards ran, by tenant: (how many took at most each of
        `bounds` seconds, how many in all, their seconds summed) — a histogram's buckets."""
        mine = " AND j.tenant = ?" if tenant is not None else ""
        buckets = ", ".join(
            f"SUM(CASE WHEN s.seconds <= {float(b)!r} THEN 1 ELSE 0 END)" for b in bounds
        )
        rows = self.db.query(
            f"SELECT COALESCE(j.tenant, ''), {buckets}, COUNT(*), SUM(s.seconds)"
            " FROM thresher_shards s JOIN thresher_jobs j ON j.id = s.job_id"
            f" WHERE s.state = ? AND s.seconds IS NOT NULL{mine} GROUP BY COALESCE(j.tenant, '')",
            (ShardState.DONE.value, *_as_params(tenant)),
        )
        n = len(bounds)
        return {
            str(r[0]): ([int(c) for c in r[1 : n + 1]], int(r[n + 1]), float(r[n + 2]))
            for r in rows
        }

    def rows_read_since(self, tenant: str, since: str) -> list[tuple[str, int]]:
        """(finished at, rows read) of each of the tenant's jobs that finished at `since` or
        later, oldest first: the rows its committed shards read."""
        rows = self.db.query(
            "SELECT j.finished_at, COALESCE(SUM(s.rows_in), 0) FROM thresher_jobs j"
            " JOIN thresher_shards s ON s.job_id = j.id AND s.state = ?"
            " WHERE j.tenant = ? AND j.finished_at >= ? GROUP BY j.id, j.finished_at"
            " ORDER BY j.finished_at",
            (ShardState.DONE.value, tenant, since),
        )
        return [(str(at), int(n)) for at, n in rows]

    def succeeded_jobs_named(self, name: str) -> list[str]:
        """The succeeded jobs whose `job.name` or `job.schedule` is `name`, oldest first."""
        rows = self.db.query(
            "SELECT id, name, spec FROM thresher_jobs WHERE state = ? AND (name = ? OR spec LIKE ?)"
            " ORDER BY created_at, id",
            (JobState.SUCCEEDED.value, name, f"%{json.dumps(name, ensure_ascii=False)}%"),
        )
        return [
            str(job_id)
            for job_id, job_name, spec in rows
            if job_name == name or json.loads(spec).get("job", {}).get("schedule") == name
        ]


def _as_params(tenant: str | None) -> list[str]:
    return [] if tenant is None else [tenant]
