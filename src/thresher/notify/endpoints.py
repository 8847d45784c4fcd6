"""OpenAI's webhook events for batches, signed as OpenAI signs them.

A tenant registers an endpoint (`POST /v1/webhook_endpoints`, the official client's
`webhooks.create`) for some of `batch.completed`, `batch.failed`, `batch.expired` and
`batch.cancelled`; when one of its batches ends so, the endpoint gets

    {"id": "evt_…", "object": "event", "created_at": <the batch's end, Unix seconds>,
     "type": "batch.completed", "data": {"id": "batch_…"}}

signed by the Standard Webhooks scheme OpenAI uses (`signing.py`), its `webhook-id` the
event's id, keyed by the endpoint's secret (`whsec_` + base64 key). So the official
client's `webhooks.unwrap(body, headers, secret=…)` checks and parses it. After a rotation
that keeps the old secret for 24 hours, each delivery carries both signatures.

Deliveries go through the webhook sender (`sender.py`: recorded, retried, resumed after
a restart, the same URL policy), keyed by the endpoint and the batch.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from datetime import UTC, datetime
from typing import Any

from thresher.notify.signing import signed_headers as standard_headers
from thresher.store import BatchRow, BatchStatus, EndpointRow

__all__ = [
    "BATCH_EVENTS",
    "batch_event",
    "endpoint_of",
    "new_endpoint_id",
    "new_secret",
    "sample_event",
    "secret_hint",
    "signed_headers",
    "subject",
]

BATCH_EVENTS = {
    BatchStatus.COMPLETED: "batch.completed",
    BatchStatus.FAILED: "batch.failed",
    BatchStatus.EXPIRED: "batch.expired",
    BatchStatus.CANCELLED: "batch.cancelled",
}
ENDPOINT_PREFIX = "we_"
SECRET_PREFIX = "whsec_"


def new_endpoint_id() -> str:
    """`we_` and a sortable time, then random hex: newest sorts last."""
    return f"{ENDPOINT_PREFIX}{datetime.now(UTC):%Y%m%d%H%M%S%f}{secrets.token_hex(4)}"


def new_secret() -> str:
    """A signing secret as OpenAI gives them: `whsec_` and a base64 key of 32 bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def secret_hint(secret: str) -> str:
    """What an endpoint shows of its secret after it is created."""
    return f"{SECRET_PREFIX}…{secret[-4:]}"


def batch_event(batch: BatchRow) -> dict[str, Any] | None:
    """The event of a batch that ended (None for a batch still on its way). Its id is
    made from the batch and the event, so the event is the same whenever it is made."""
    event = BATCH_EVENTS.get(batch.status)
    if event is None:
        return None
    at = batch.status_at or batch.created_at
    digest = hashlib.sha256(f"{batch.id}\0{event}".encode()).hexdigest()[:24]
    return _event(f"evt_{digest}", event, at, batch.id)


def sample_event(event: str, at: int) -> dict[str, Any]:
    """A test delivery's event (`POST /v1/webhook_endpoints/{id}/test`)."""
    return _event(f"evt_test_{secrets.token_hex(12)}", event, at, "batch_test")


def _event(event_id: str, event: str, at: int, batch_id: str) -> dict[str, Any]:
    return {
        "id": event_id,
        "object": "event",
        "created_at": at,
        "type": event,
        "data": {"id": batch_id},
    }


def signed_headers(endpoint: EndpointRow, event_id: str, body: bytes, at: float) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt made at `at` (Unix seconds), a
    signature per secret the endpoint signs with then."""
    return standard_headers(endpoint.secrets(at), event_id, body, at)


def subject(endpoint_id: str, batch_id: str) -> str:
    """The delivery's key for one batch event to one endpoint."""
    return f"{endpoint_id}/{batch_id}"


def endpoint_of(delivery_subject: str) -> str | None:
    """The endpoint a delivery goes to, when it is a batch event's (else None)."""
    if not delivery_subject.startswith(ENDPOINT_PREFIX):
        return None
    return delivery_subject.split("/", 1)[0]
