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

Every attempt is signed with the server's `webhook_secret` by the Standard Webhooks
scheme (`signing.py`): a receiver checks it with `standardwebhooks.Webhook(
standard_secret(secret)).verify(raw_body, headers)`, or thresher's own
`verify_signature(secret, headers, raw_body)`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from thresher.store import JobRecord, JobState, Store

__all__ = ["EVENTS", "job_event", "tick_event", "webhook_of"]

EVENTS = {
    JobState.SUCCEEDED: "job.completed",
    JobState.FAILED: "job.failed",
    JobState.CANCELLED: "job.cancelled",
}


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
