"""Retry rounds of a job's failed rows (`thresher retry-errors`), shard by shard.

A shard of a retry round moves `pending -> output_committed -> done`. The middle state is
what keeps a crash honest: once the retried rows' part is committed, its counts are
recorded before the shard's error part is replaced, so a rerun never mistakes the rows it
already fixed for rows that were never there.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thresher.store._db import Database, now


class RoundState(StrEnum):
    RUNNING = "running"
    DONE = "done"


class RetryShardState(StrEnum):
    OUTPUT_COMMITTED = "output_committed"  # its fixed rows are in; its errors not replaced
    DONE = "done"


@dataclass(frozen=True)
class RetryShard:
    state: RetryShardState
    rows_fixed: int
    rows_failed: int


class RetryLog:
    """Rounds and per-shard progress of retries, beside the job tables."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def begin(self, job_id: str, model_sha256: str | None) -> int:
        """The unfinished round to carry on with, or a new one."""
        with self.db.transaction() as cur:
            row = cur.execute(
                "SELECT round FROM thresher_retries WHERE job_id = ? AND state = ?",
                (job_id, RoundState.RUNNING.value),
            ).fetchone()
            if row:
                return int(row[0])
            last = cur.execute(
                "SELECT COALESCE(MAX(round), 0) FROM thresher_retries WHERE job_id = ?", (job_id,)
            ).fetchone()
            number = int(last[0] if last else 0) + 1
            cur.execute(
                "INSERT INTO thresher_retries (job_id, round, state, started_at, model_sha256)"
                " VALUES (?, ?, ?, ?, ?)",
                (job_id, number, RoundState.RUNNING.value, now(), model_sha256),
            )
        return number

    def shards(self, job_id: str, number: int) -> dict[int, RetryShard]:
        rows = self.db.query(
            "SELECT idx, state, rows_fixed, rows_failed FROM thresher_retry_shards"
            " WHERE job_id = ? AND round = ?",
            (job_id, number),
        )
        return {int(r[0]): RetryShard(RetryShardState(r[1]), int(r[2]), int(r[3])) for r in rows}

    def output_committed(
        self, job_id: str, number: int, index: int, counts: tuple[int, int]
    ) -> None:
        """The round's part for the shard is committed: `counts` = (fixed, still failing)."""
        fixed, failed = counts
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO thresher_retry_shards VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, number, index, RetryShardState.OUTPUT_COMMITTED.value, fixed, failed),
            )

    def shard_done(self, job_id: str, number: int, index: int) -> None:
        """The error part is replaced: move the fixed rows from errors to output in the
        shard's counts, in the same transaction that closes the shard's retry."""
        with self.db.transaction() as cur:
            row = cur.execute(
                "SELECT rows_fixed, state FROM thresher_retry_shards"
                " WHERE job_id = ? AND round = ? AND idx = ?",
                (job_id, number, index),
            ).fetchone()
            if row is None or row[1] == RetryShardState.DONE:
                return
            cur.execute(
                "UPDATE thresher_shards SET rows_out = rows_out + ?, rows_error = rows_error - ?"
                " WHERE job_id = ? AND idx = ?",
                (row[0], row[0], job_id, index),
            )
            cur.execute(
                "UPDATE thresher_retry_shards SET state = ?"
                " WHERE job_id = ? AND round = ? AND idx = ?",
                (RetryShardState.DONE.value, job_id, number, index),
            )

    def finish(self, job_id: str, number: int) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_retries SET state = ?, finished_at = ?"
                " WHERE job_id = ? AND round = ?",
                (RoundState.DONE.value, now(), job_id, number),
            )

    def rounds(self, job_id: str) -> list[dict[str, object]]:
        rows = self.db.query(
            "SELECT r.round, r.started_at, r.finished_at, r.model_sha256,"
            " COALESCE(SUM(s.rows_fixed), 0), COALESCE(SUM(s.rows_failed), 0)"
            " FROM thresher_retries r LEFT JOIN thresher_retry_shards s"
            " ON s.job_id = r.job_id AND s.round = r.round"
            " WHERE r.job_id = ? GROUP BY r.round, r.started_at, r.finished_at, r.model_sha256"
            " ORDER BY r.round",
            (job_id,),
        )
        keys = ("round", "started_at", "finished_at", "model_sha256", "rows_fixed", "rows_failed")
        # int(): PostgreSQL's SUM is a numeric, which the driver hands over as text
        return [dict(zip(keys, (*r[:4], int(r[4]), int(r[5])), strict=True)) for r in rows]
