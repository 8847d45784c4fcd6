"""Telling downstream systems from a command-line job, as the service does: when a job
run by `thresher run`, `resume` or `retry-errors` ends, its `notify.webhook` gets the same
signed event the service sends (`events.py` has the format and how to verify it),
recorded once per job and event in the store, retried on failure.

The signing secret is `$THRESHER_WEBHOOK_SECRET` (the service's is its `webhook_secret`).
Private and loopback addresses are allowed: the person running the command chose the URL,
unlike a tenant's job on a shared server. The command waits for the deliveries to settle
(at most about a minute with the retries, tried within it) before it exits.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from thresher.errors import SpecError
from thresher.spec import JobSpec
from thresher.store import Store

__all__ = ["SECRET_VARIABLE", "check_notify", "notify_job_end"]

SECRET_VARIABLE = "THRESHER_WEBHOOK_SECRET"
SETTLE_SECONDS = 60.0


def _targets(spec: JobSpec) -> list[str]:
    return [url for url in (spec.notify.webhook, spec.monitor.alert_webhook) if url]


def check_notify(spec: JobSpec) -> None:
    """Before a job starts: a webhook to send needs the secret to sign it with, and the
    service extra's HTTP client."""
    if not _targets(spec):
        return
    if not os.environ.get(SECRET_VARIABLE):
        raise SpecError(
            [
                f"notify.webhook / monitor.alert_webhook: set ${SECRET_VARIABLE} to the secret"
                " the receiver checks signatures with (see README, Webhooks)"
            ]
        )
    try:
        import httpx2  # noqa: F401
    except ImportError:
        raise SpecError(
            ["notify.webhook: sending webhooks needs `pip install 'thresher[service]'`"]
        ) from None


def notify_job_end(
    store: Store, job_id: str, say: Callable[[str], None], timeout: float = SETTLE_SECONDS
) -> list[dict[str, Any]]:
    """Send the ended job's webhooks and wait for them to settle; `say` reports each."""
    job = store.job(job_id)
    if not _targets(job.spec):
        return []
    # The sender needs the service extra (httpx2), which `check_notify` asked for.
    from thresher.notify.sender import RetryPolicy, WebhookSender, WebhookSettings

    # Tries within the wait below, so the command reports each delivery settled.
    retry = RetryPolicy(first=1.0, longest=16.0, window=timeout * 0.8)
    settings = WebhookSettings(
        os.environ[SECRET_VARIABLE], allow_private=True, workers=2, retry=retry
    )
    sender = WebhookSender(store, settings)
    try:
        sender.job_finished(job)
        rows = sender.settle(job_id, timeout)
    finally:
        sender.close()
    for row in rows:
        answer = f"HTTP {row['last_status']}" if row["last_status"] else row["last_error"]
        say(f"webhook {row['event']} to {row['url']}: {row['state']} ({answer})")
    return rows
