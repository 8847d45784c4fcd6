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

    def pending(self) -> list[tuple[str, str, str, str, int, str]]:
        """(job_id, event, url, payload, attempts, created_at) of every delivery not yet
        settled."""
        rows = self.db.query(
            "SELECT job_id, event, url, payload, attempts, created_at"
            " FROM thresher_webhook_deliveries WHERE state = ?",
            (DeliveryState.PENDING.value,),
        )
        return [(str(a), str(b), str(c), str(d), int(e), str(f)) for a, b, c, d, e, f in rows]

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

    def counts(self) -> dict[str, int]:
        """How many deliveries stand in each state (the pending ones: the backlog)."""
        rows = self.db.query(
            "SELECT state, COUNT(*) FROM thresher_webhook_deliveries GROUP BY state"
        )
        return {str(state): int(n) for state, n in rows}

    def of_job(self, job_id: str) -> list[dict[str, Any]]:
        """A job's recorded deliveries, oldest first."""
        return self._listed("job_id = ?", job_id)

    def of_endpoint(self, endpoint_id: str) -> list[dict[str, Any]]:
        """The deliveries to a webhook endpoint (subjects `<endpoint id>/<batch id>`),
        oldest first, each with its `subject`."""
        return self._listed("job_id LIKE ? ESCAPE '!'", _escaped(endpoint_id) + "/%")

    def reopen(self, subjects: list[str]) -> list[tuple[str, str, str, str]]:
        """Send again: the failed and refused deliveries of these subjects become pending
        with no tries and a new retry window (their last answer kept until the next);
        returns (subject, event, url, payload) of each."""
        if not subjects:
            return []
        marks = ", ".join("?" for _ in subjects)
        ended = (DeliveryState.FAILED.value, DeliveryState.REFUSED.value)
        with self.db.transaction() as cur:
            rows = cur.execute(
                "UPDATE thresher_webhook_deliveries SET state = ?, attempts = 0, created_at = ?"
                f" WHERE job_id IN ({marks}) AND state IN (?, ?)"
                " RETURNING job_id, event, url, payload",
                (DeliveryState.PENDING.value, now(), *subjects, *ended),
            ).fetchall()
        return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]

    def _listed(self, where: str, *args: str) -> list[dict[str, Any]]:
        rows = self.db.query(
            "SELECT job_id, event, url, state, attempts, last_status, last_error, created_at,"
            f" delivered_at FROM thresher_webhook_deliveries WHERE {where} ORDER BY created_at",
            args,
        )
        keys = ("subject", "event", "url", "state", "attempts", "last_status", "last_error")
        return [dict(zip((*keys, "created_at", "delivered_at"), r, strict=True)) for r in rows]


def _escaped(text: str) -> str:
    """`text` matched literally by LIKE (ESCAPE '!')."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
