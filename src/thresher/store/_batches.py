"""OpenAI-style batches (`thresher_batches`): one row per batch, with its status, its
job, its output and error files and OpenAI's Unix timestamps of each status."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from thresher.store._counted import make_room
from thresher.store._db import Database

__all__ = ["STAMPS", "BatchRow", "BatchStatus", "BatchTable"]


class BatchStatus(StrEnum):
    VALIDATING = "validating"
    FAILED = "failed"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (
            BatchStatus.FAILED,
            BatchStatus.COMPLETED,
            BatchStatus.EXPIRED,
            BatchStatus.CANCELLED,
        )


# The column each status's time is recorded in.
STAMPS = {
    BatchStatus.IN_PROGRESS: "in_progress_at",
    BatchStatus.FINALIZING: "finalizing_at",
    BatchStatus.COMPLETED: "completed_at",
    BatchStatus.FAILED: "failed_at",
    BatchStatus.EXPIRED: "expired_at",
    BatchStatus.CANCELLING: "cancelling_at",
    BatchStatus.CANCELLED: "cancelled_at",
}


@dataclass(frozen=True)
class BatchRow:
    id: str
    tenant: str
    input_file_id: str
    endpoint: str
    completion_window: str
    status: BatchStatus
    created_at: int
    expires_at: int | None = None
    metadata: dict[str, str] | None = None
    model: str | None = None
    job_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: dict[str, Any] | None = None
    counts: dict[str, int] | None = None
    usage: dict[str, int] | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    priority: int = 0  # thresher's: the priority of the batch's job

    @property
    def status_at(self) -> int | None:
        """When it entered its status (None for `validating`: see `created_at`)."""
        column = STAMPS.get(self.status)
        stamp: int | None = getattr(self, column) if column else None
        return stamp


COLUMNS = [f.name for f in fields(BatchRow)]
SELECTED = ", ".join(COLUMNS)
JSON_COLUMNS = ("metadata", "errors", "counts", "usage")


@dataclass(frozen=True)
class BatchTable:
    db: Database

    def create(self, row: BatchRow, limit: int | None = None) -> None:
        """Record a new batch; AtLimit if its tenant has `limit` batches not yet ended."""
        values = [_stored(name, getattr(row, name)) for name in COLUMNS]
        marks = ", ".join("?" for _ in COLUMNS)
        with self.db.transaction() as cur:
            if limit is not None:
                ended = [s.value for s in BatchStatus if s.finished]
                live = f"tenant = ? AND status NOT IN ({', '.join('?' for _ in ended)})"
                where = (live, (row.tenant, *ended))
                make_room(cur, self.db.dialect, "thresher_batches", where=where, limit=limit)
            cur.execute(
                f"INSERT INTO thresher_batches ({', '.join(COLUMNS)}) VALUES ({marks})", values
            )

    def find(self, batch_id: str, tenant: str | None = None) -> BatchRow | None:
        """The batch (the tenant's, when one is given); None if there is none."""
        where, params = "id = ?", [batch_id]
        if tenant is not None:
            where, params = "id = ? AND tenant = ?", [batch_id, tenant]
        rows = self.db.query(
            f"SELECT {', '.join(COLUMNS)} FROM thresher_batches WHERE {where}", params
        )
        return _row(rows[0]) if rows else None

    def of_tenant(self, tenant: str, limit: int, after: str | None) -> list[BatchRow]:
        """A page of the tenant's batches, newest first (ids sort by time)."""
        where, params = "tenant = ?", [tenant]
        if after is not None:
            where, params = "tenant = ? AND id < ?", [tenant, after]
        rows = self.db.query(
            f"SELECT {SELECTED} FROM thresher_batches WHERE {where} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [_row(r) for r in rows]

    def unfinished(self) -> list[BatchRow]:
        """Every batch still on its way, oldest first."""
        done = [s.value for s in BatchStatus if s.finished]
        marks = ", ".join("?" for _ in done)
        rows = self.db.query(
            f"SELECT {SELECTED} FROM thresher_batches WHERE status NOT IN ({marks}) ORDER BY id",
            done,
        )
        return [_row(r) for r in rows]

    def move(self, batch_id: str, before: BatchStatus, after: BatchStatus, **changes: Any) -> bool:
        """Put the batch in status `after` (stamping its time) if it is in `before`, with
        the column `changes`; False if it was not in `before` (another thread moved it)."""
        values = {**changes, "status": after}
        if after in STAMPS:
            values[STAMPS[after]] = int(time.time())
        sets = ", ".join(f"{name} = ?" for name in values)
        params = [_stored(name, value) for name, value in values.items()]
        with self.db.transaction() as cur:
            moved = cur.changed(
                f"UPDATE thresher_batches SET {sets} WHERE id = ? AND status = ?",
                (*params, batch_id, before.value),
            )
        return moved > 0


def _stored(name: str, value: Any) -> Any:
    if name in JSON_COLUMNS:
        return None if value is None else json.dumps(value)
    return value.value if isinstance(value, StrEnum) else value


def _row(values: tuple[Any, ...]) -> BatchRow:
    data = dict(zip(COLUMNS, values, strict=True))
    for name in JSON_COLUMNS:
        data[name] = None if data[name] is None else json.loads(data[name])
    data["status"] = BatchStatus(data["status"])
    return BatchRow(**data)
