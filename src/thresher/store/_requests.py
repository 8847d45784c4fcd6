"""The request buffer's table, `thresher_requests`: one row per buffered record.

Every method is one transaction, and every change of state is guarded by the state it
leaves (`WHERE state = 'waiting'` to batch, `WHERE state = 'batched'` to settle), so a
record moves waiting → batched → done | failed once, whoever calls twice. The protocol
these steps make up is told in `thresher.service.background.buffer`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from thresher.store._db import Database, now


class RequestState(StrEnum):
    WAITING = "waiting"  # buffered, in no batch yet
    BATCHED = "batched"  # in batch `batch_id`; `job_id` once the batch's job is known
    DONE = "done"  # `result` holds the prediction
    FAILED = "failed"  # `error` says why there is none


@dataclass(frozen=True)
class BufferedRequest:
    """One buffered record as `GET /v1/requests/{custom_id}` shows it."""

    custom_id: str
    model: str
    state: RequestState
    job_id: str | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    created_at: str
    finished_at: str | None


@dataclass(frozen=True)
class WaitingGroup:
    """The waiting records of one tenant and model: how many, and since when."""

    tenant: str
    model: str
    count: int
    oldest: str


class DuplicateRequest(Exception):
    """A custom_id the tenant has used before."""

    def __init__(self, custom_ids: list[str]) -> None:
        self.custom_ids = custom_ids
        super().__init__(", ".join(custom_ids))


class RequestTable:
    """`thresher_requests` in the store's database (`create` makes the table first)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, tenant: str, records: list[tuple[str, str, dict[str, Any]]]) -> str:
        """Buffer `(custom_id, model, input)` records, all or none, and return their
        `created_at`; DuplicateRequest names the custom_ids the tenant has used already."""
        created = now()
        with self.db.transaction() as cur:
            taken = []
            for custom_id, model, features in records:
                added = cur.changed(
                    "INSERT INTO thresher_requests (tenant, custom_id, model, record, state,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (tenant, custom_id, model, json.dumps(features), RequestState.WAITING.value,
                     created),
                )  # fmt: skip
                if not added:
                    taken.append(custom_id)
            if taken:
                raise DuplicateRequest(taken)  # rolls the whole request back
        return created

    def get(self, tenant: str, custom_id: str) -> BufferedRequest | None:
        """The tenant's record `custom_id`, or None (another tenant's is None too)."""
        rows = self.db.query(
            "SELECT custom_id, model, state, job_id, result, error, created_at, finished_at"
            " FROM thresher_requests WHERE tenant = ? AND custom_id = ?",
            (tenant, custom_id),
        )
        if not rows:
            return None
        row = rows[0]
        return BufferedRequest(
            custom_id=row[0],
            model=row[1],
            state=RequestState(row[2]),
            job_id=row[3],
            result=json.loads(row[4]) if row[4] else None,
            error=json.loads(row[5]) if row[5] else None,
            created_at=row[6],
            finished_at=row[7],
        )

    def waiting_groups(self) -> list[WaitingGroup]:
        """Each (tenant, model) with waiting records."""
        rows = self.db.query(
            "SELECT tenant, model, COUNT(*), MIN(created_at) FROM thresher_requests"
            " WHERE state = ? GROUP BY tenant, model",
            (RequestState.WAITING.value,),
        )
        return [WaitingGroup(str(r[0]), str(r[1]), int(r[2]), str(r[3])) for r in rows]

    def claim_batch(self, tenant: str, model: str, batch_id: str, limit: int) -> int:
        """Put the oldest `limit` waiting records of a tenant's model in batch `batch_id`;
        returns how many it took."""
        with self.db.transaction() as cur:
            return cur.changed(
                "UPDATE thresher_requests SET state = ?, batch_id = ?"
                " WHERE tenant = ? AND state = ? AND custom_id IN (SELECT custom_id"
                " FROM thresher_requests WHERE tenant = ? AND model = ? AND state = ?"
                " ORDER BY created_at, custom_id LIMIT ?)",
                (RequestState.BATCHED.value, batch_id, tenant, RequestState.WAITING.value,
                 tenant, model, RequestState.WAITING.value, limit),
            )  # fmt: skip

    def batch_lines(self, batch_id: str) -> list[dict[str, Any]]:
        """The input rows of a batch, `custom_id` first, in a stable order."""
        rows = self.db.query(
            "SELECT custom_id, record FROM thresher_requests WHERE batch_id = ?"
            " ORDER BY created_at, custom_id",
            (batch_id,),
        )
        return [{"custom_id": row[0], **json.loads(row[1])} for row in rows]

    def unlinked_batches(self) -> list[tuple[str, str, str]]:
        """`(batch_id, tenant, model)` of batches whose job is not recorded yet."""
        rows = self.db.query(
            "SELECT DISTINCT batch_id, tenant, model FROM thresher_requests"
            " WHERE state = ? AND job_id IS NULL",
            (RequestState.BATCHED.value,),
        )
        return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]

    def linked_batches(self) -> list[tuple[str, str]]:
        """`(batch_id, job_id)` of batches waiting for their job to end."""
        rows = self.db.query(
            "SELECT DISTINCT batch_id, job_id FROM thresher_requests"
            " WHERE state = ? AND job_id IS NOT NULL",
            (RequestState.BATCHED.value,),
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    def link(self, batch_id: str, job_id: str) -> None:
        """Record the job that runs batch `batch_id`."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_requests SET job_id = ? WHERE batch_id = ?", (job_id, batch_id)
            )

    def settle(
        self,
        batch_id: str,
        job_id: str | None,
        answers: dict[str, tuple[RequestState, dict[str, Any]]],
        missing: dict[str, Any],
    ) -> int:
        """Answer every record of a batch still `batched`: with its entry in `answers`
        (`custom_id` → done with a result or failed with an error), else failed with the
        error `missing`. Returns how many records it answered (0 when run again)."""
        finished = now()
        with self.db.transaction() as cur:
            open_ids = cur.execute(
                "SELECT custom_id FROM thresher_requests WHERE batch_id = ? AND state = ?",
                (batch_id, RequestState.BATCHED.value),
            ).fetchall()
            for (custom_id,) in open_ids:
                state, value = answers.get(custom_id, (RequestState.FAILED, missing))
                done = state == RequestState.DONE
                cur.execute(
                    "UPDATE thresher_requests SET state = ?, result = ?, error = ?, job_id = ?,"
                    " finished_at = ? WHERE batch_id = ? AND custom_id = ? AND state = ?",
                    (state.value, json.dumps(value) if done else None,
                     None if done else json.dumps(value), job_id, finished, batch_id, custom_id,
                     RequestState.BATCHED.value),
                )  # fmt: skip
        return len(open_ids)

    def batch_tenant(self, batch_id: str) -> str | None:
        """The tenant whose records make up batch `batch_id`, or None for no such batch."""
        rows = self.db.query(
            "SELECT tenant FROM thresher_requests WHERE batch_id = ? LIMIT 1", (batch_id,)
        )
        return str(rows[0][0]) if rows else None

    def idempotency_key(self, job_id: str) -> str | None:
        """The idempotency key job `job_id` was submitted with (the buffer's name its
        batch), or None."""
        rows = self.db.query("SELECT idempotency_key FROM thresher_jobs WHERE id = ?", (job_id,))
        return str(rows[0][0]) if rows and rows[0][0] is not None else None
