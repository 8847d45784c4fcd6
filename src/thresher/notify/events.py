"""The webhooks thresher sends when a job ends (`notify.webhook` in a job's spec), from the
service and from `thresher run` alike, and how a receiver checks them.

When a job reaches a terminal state thresher POSTs one JSON event to the job's webhook:

    {"event": "job.completed", "job_id": "20261130-020304-a1b2c3", "status": "succeeded",
     "request_counts": {"total": 10, "completed": 9, "failed": 1},
     "created_at": "…", "finished_at": "…"}

`event` is `job.completed`, `job.failed` or `job.cancelled`; `status` is the job's status
as `GET /v1/jobs/{id}` shows it (`succeeded`, `failed`, `cancelled`). A schedule's
`notify.on_missed` gets one for each tick recorded missed or failed:

    {"event": "schedule.tick_missed", "schedule": "nightly",
     "nominal_time": "2026-12-01T02:00:00+00:00", "outcome": "missed",
     "message": "too late to run"}

(its delivery row's `job_id` is the tick's key, `tick:<schedule>:<nominal time>`). A
tenant's OpenAI batch events go to its webhook endpoints, signed as OpenAI signs them
(`endpoints.py`; the row's `job_id` is `<endpoint id>/<batch id>`).

Every attempt is signed with the server's `webhook_secret`: `X-Thresher-Timestamp` is the
attempt's Unix time and `X-Thresher-Signature` is `sha256=` + the hex HMAC-SHA256 of
`"<timestamp>.<body>"`. To verify one, recompute that over the raw bytes received (not
re-serialised JSON), compare in constant time, and refuse timestamps more than a few
minutes old, so a captured delivery cannot be replayed later. `verify_signature` does
all three:

    ok = verify_signature(secret, headers["X-Thresher-Timestamp"], raw_body,
                          headers["X-Thresher-Signature"])
"""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import datetime
from typing import Any

from thresher.store import JobRecord, JobState, Store

__all__ = [
    "EVENTS",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "job_event",
    "sign",
    "tick_event",
    "verify_signature",
    "webhook_of",
]

TIMESTAMP_HEADER = "X-Thresher-Timestamp"
SIGNATURE_HEADER = "X-Thresher-Signature"
EVENTS = {
    JobState.SUCCEEDED: "job.completed",
    JobState.FAILED: "job.failed",
    JobState.CANCELLED: "job.cancelled",
}


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The `X-Thresher-Signature` value for `body` sent at `timestamp`."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={digest.hexdigest()}"


def verify_signature(
    secret: str, timestamp: str, body: bytes | str, header: str, max_age: float | None = 300.0
) -> bool:
    """For receivers: whether `header` (`X-Thresher-Signature`) signs `body` at `timestamp`
    (`X-Thresher-Timestamp`) with `secret`, and the timestamp is at most `max_age` seconds
    from now (None: any age)."""
    if max_age is not None:
        try:
            if abs(time.time() - int(timestamp)) > max_age:
                return False
        except ValueError:
            return False
    raw = body.encode() if isinstance(body, str) else body
    return hmac.compare_digest(sign(secret, timestamp, raw), header.strip())


def job_event(job: JobRecord, store: Store) -> dict[str, Any]:
    """The webhook body for a job that ended."""
    totals = store.totals(job.id)
    return {
        "event": EVENTS[job.state],
        "job_id": job.id,
        "status": job.state.value,
        "request_counts": {
            "total": totals.rows_in,
            "completed": totals.rows_out,
            "failed": totals.rows_error,
        },
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    }


def webhook_of(job: JobRecord) -> str | None:
    """The job's `notify.webhook` URL, if it has one."""
    return job.spec.notify.webhook


def tick_event(name: str, nominal: datetime, outcome: str, message: str | None) -> dict[str, Any]:
    """The `notify.on_missed` body for schedule `name`'s tick at `nominal` that did not
    start its job (`outcome`: `missed` or `failed`)."""
    return {
        "event": f"schedule.tick_{outcome}",
        "schedule": name,
        "nominal_time": nominal.isoformat(),
        "outcome": outcome,
        "message": message,
    }
