"""Webhook deliveries (`thresher_webhook_deliveries`): one row per job event and URL, so a
job's webhook is sent once however often its end is seen, and resumed after a restart."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from thresher.store._db import Database, now

__all__ = ["DeliveryState", "DeliveryTable"]


class DeliveryState(StrEnum):
    PENDING = "pending"  # waiting for its next try
    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # out of tries, or an answer that is not worth retrying
    REFUSED = "refused"  # the URL broke the policy; nothing was sent


@dataclass(frozen=True)
class DeliveryTable:
    db: Database

    def add(self, job_id: str, event: str, url: str, payload: str) -> bool:
        """Record a pending delivery; False if this job's event to `url` already is."""
        with self.db.transaction() as cur:
            added = cur.changed(
                "INSERT INTO thresher_webhook_deliveries (job_id, event, url, payload, state,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (job_id, event, url, payload, DeliveryState.PENDING.value, now()),
            )
        return added > 0

    def pending(self) -> list[tuple[str, str, str, str, int]]:
        """(job_id, event, url, payload, attempts) of every delivery not yet settled."""
        rows = self.db.query(
            "SELECT job_id, event, url, payload, attempts FROM thresher_webhook_deliveries"
            " WHERE state = ?",
            (DeliveryState.PENDING.value,),
        )
        return [(str(a), str(b), str(c), str(d), int(e)) for a, b, c, d, e in rows]

    def record(
        self,
        key: tuple[str, str, str],
        tries: int,
        answer: tuple[int | None, str | None],
        state: DeliveryState,
    ) -> None:
        """After a try of delivery `key` = (job_id, event, url): its `answer` (HTTP status,
        error) and where it stands."""
        status, error = answer
        delivered_at = now() if state == DeliveryState.DELIVERED else None
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_webhook_deliveries SET attempts = ?, last_status = ?,"
                " last_error = ?, state = ?, delivered_at = ?"
                " WHERE job_id = ? AND event = ? AND url = ?",
                (tries, status, error, state.value, delivered_at, *key),
            )

    def of_job(self, job_id: str) -> list[dict[str, Any]]:
        """A job's recorded deliveries, oldest first."""
        rows = self.db.query(
            "SELECT event, url, state, attempts, last_status, last_error, created_at,"
            " delivered_at FROM thresher_webhook_deliveries WHERE job_id = ? ORDER BY created_at",
            (job_id,),
        )
        keys = ("event", "url", "state", "attempts", "last_status", "last_error")
        return [dict(zip((*keys, "created_at", "delivered_at"), r, strict=True)) for r in rows]
