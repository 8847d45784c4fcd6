"""Signed webhooks when a job ends: `notify.webhook` in a job's spec.

When a job reaches a terminal state the service POSTs one JSON event to the job's webhook:

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
(`thresher.service.openai.webhooks`; the row's `job_id` is `<endpoint id>/<batch id>`).

Every attempt is signed with the server's `webhook_secret`: `X-Thresher-Timestamp` is the
attempt's Unix time and `X-Thresher-Signature` is `sha256=` + the hex HMAC-SHA256 of
`"<timestamp>.<body>"`. To verify one, recompute that over the raw bytes received (not
re-serialised JSON), compare in constant time, and refuse timestamps more than a few
minutes old, so a captured delivery cannot be replayed later. `verify_signature` does
all three:

    ok = verify_signature(secret, headers["X-Thresher-Timestamp"], raw_body,
                          headers["X-Thresher-Signature"])

Deliveries run on background threads, so the scheduler never waits on a receiver. They
are retried with exponential backoff (1, 2, 4, 8 s: five tries) on connection errors,
429 and 5xx; any other answer ends them. Each attempt has a wall-clock deadline, all of
it (`webhook_timeout`, 10 s: connect, send and the answer's headers, however slowly the
receiver drips them; `attempts.py`), and an attempt cut at it is retried like a
connection error. A tenant's deliveries hold at most its share of the delivery threads
(`webhook_workers_per_tenant` of `webhook_workers`), so its slow receiver delays only
its own webhooks. Each is a row of `thresher_webhook_deliveries`
(job, event, url, attempts, last status, delivered_at); those still pending when the
server stops resume when it starts again.

URL policy (`check_webhook_url`): http or https only, and every address the host
resolves to must be public — loopback, private, link-local, multicast, reserved and
unspecified addresses are refused unless the server sets `webhook_allow_private`. The
jobs API checks at submission; each attempt checks again (DNS may have changed) and then
connects to the very address it checked, with no proxy and no redirects followed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2 as httpx

from thresher.loops import QUARANTINE_AFTER, Strikes, retrying
from thresher.service.background.attempts import post_webhook, webhook_client
from thresher.service.background.delivery import Delivery, RetryingDispatcher
from thresher.service.openai.webhooks import batch_event, endpoint_of, signed_headers, subject
from thresher.service.policies.webhook_urls import check_webhook_url
from thresher.store import JobRecord, JobState, Store, StoreError
from thresher.store.batches import BatchRow
from thresher.store.db import Database
from thresher.store.deliveries import DeliveryState, DeliveryTable
from thresher.store.ticks import tick_key
from thresher.store.webhook_endpoints import EndpointTable

if TYPE_CHECKING:
    from thresher.service.schedules import TickNotice
    from thresher.service.state import ServiceState

__all__ = [
    "WebhookSender",
    "WebhookSettings",
    "check_webhook_url",
    "post_webhook",
    "sign",
    "start_webhooks",
    "verify_signature",
    "webhook_client",
]

log = logging.getLogger("thresher.service.background.webhooks")

TIMESTAMP_HEADER = "X-Thresher-Timestamp"
SIGNATURE_HEADER = "X-Thresher-Signature"
EVENTS = {
    JobState.SUCCEEDED: "job.completed",
    JobState.FAILED: "job.failed",
    JobState.CANCELLED: "job.cancelled",
}


@dataclass(frozen=True)
class WebhookSettings:
    """How webhooks are signed and sent. `backoff` holds the waits between tries,
    `timeout` the wall-clock limit of one whole attempt; `workers` threads deliver, at
    most `per_tenant` of them for one tenant's deliveries."""

    secret: str
    allow_private: bool = False
    backoff: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    timeout: float = 10.0
    workers: int = 8
    per_tenant: int = 2
    quarantine_after: int = QUARANTINE_AFTER


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


class WebhookSender:
    """Records and delivers webhooks; `job_finished` is the `on_job_finished` hook."""

    def __init__(self, store: Store, settings: WebhookSettings) -> None:
        self._store, self._settings = store, settings
        self._deliveries = DeliveryTable(store.db)
        self._client = webhook_client()
        strikes, key = Strikes("webhooks", settings.quarantine_after), _delivery_key
        tried = retrying(strikes, key, self._attempt, self._give_up, settings.backoff)
        self._dispatcher = RetryingDispatcher(tried, settings.workers, settings.per_tenant)

    def job_finished(self, job: JobRecord) -> None:
        """Record the job's webhook and its drift alert (`[monitor] alert_webhook`, see
        `thresher.monitor.alerts`), once per job and event, and queue them for delivery."""
        url = webhook_of(job)
        if url is not None and job.state in EVENTS:
            self._send(job.id, EVENTS[job.state], url, json.dumps(job_event(job, self._store)))
        if job.spec.monitor.alert_webhook:
            from thresher.monitor.alerts import alert_message  # the drift code, when needed

            alert = alert_message(self._store, job)
            if alert is not None:
                self._send(job.id, *alert)

    def batch_ended(self, batch: BatchRow) -> None:
        """Record and queue an ended batch's OpenAI event (`batch.completed`, …) for each
        of its tenant's endpoints that takes it, once per endpoint
        (`thresher.service.openai.webhooks`). An endpoint made after the batch ended does
        not get it (a late announcement, after a server died, must not reach one)."""
        event = batch_event(batch)
        if event is None:
            return
        payload = json.dumps(event)
        for endpoint in EndpointTable(self._store.db).subscribed(batch.tenant, event["type"]):
            if endpoint.created_at <= event["created_at"]:
                self._send(subject(endpoint.id, batch.id), event["type"], endpoint.url, payload)

    def _send(self, job_id: str, event: str, url: str, payload: str) -> None:
        if self._deliveries.add(job_id, event, url, payload):
            self._dispatcher.submit(Delivery(job_id, event, url, payload, 0, self._owner(job_id)))

    def _owner(self, subject: str) -> str:
        """The tenant a delivery is for, whose share of the threads it takes, from its
        subject: an endpoint's tenant, a tenant schedule's (`tick:<tenant>/<name>:…`) or
        a job's; `""` for the operator's (a config schedule, a job with no tenant)."""
        endpoint_id = endpoint_of(subject)
        if endpoint_id is not None:
            endpoint = EndpointTable(self._store.db).find(endpoint_id)
            return endpoint.tenant if endpoint is not None else ""
        if subject.startswith("tick:"):
            schedule = subject.split(":", 2)[1]
            return schedule.split("/", 1)[0] if "/" in schedule else ""
        try:
            return self._store.job(subject).tenant or ""
        except StoreError:
            return ""

    def tick_missed(self, notice: TickNotice) -> None:
        """Record and queue the `notify.on_missed` webhook of a tick that did not start
        its job: `schedule.tick_missed` or `schedule.tick_failed`, once per tick."""
        notify = notice.schedule.settings.notify
        if notify is None:
            return
        event = f"schedule.tick_{notice.outcome}"
        body = {
            "event": event,
            "schedule": notice.schedule.name,
            "nominal_time": notice.nominal.isoformat(),
            "outcome": notice.outcome,
            "message": notice.message,
        }
        key = tick_key(notice.schedule.key, notice.nominal)
        self._send(key, event, notify.on_missed, json.dumps(body))

    def resume_pending(self) -> int:
        """Queue the deliveries a stopped server left pending; returns how many."""
        rows = self._deliveries.pending()
        for job_id, event, url, payload, attempts in rows:
            delivery = Delivery(job_id, event, url, payload, attempts, self._owner(job_id))
            self._dispatcher.submit(delivery)
        return len(rows)

    def settle(self, job_id: str, timeout: float) -> list[dict[str, Any]]:
        """Wait (up to `timeout` seconds) until none of the job's deliveries is pending,
        retries included; returns them as they stand. For a process that exits after
        its job, such as `thresher run`."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self._deliveries.of_job(job_id)
            pending = any(r["state"] == DeliveryState.PENDING.value for r in rows)
            if not pending or time.monotonic() >= deadline:
                return rows
            time.sleep(0.05)

    def close(self) -> None:
        """Stop sending; deliveries not yet done stay pending for the next start."""
        self._dispatcher.close()
        self._client.close()

    def _give_up(self, delivery: Delivery, reason: str) -> None:
        self._record(delivery, delivery.attempts + 1, None, reason, DeliveryState.FAILED)

    def _attempt(self, delivery: Delivery) -> float | None:
        """One try; returns the wait before the next one, or None when it is over."""
        tries = delivery.attempts + 1
        status: int | None = None
        try:
            status = self._post(delivery)
            error = None if 200 <= status < 300 else f"HTTP {status}"
        except ValueError as exc:  # the policy refused the URL as it resolves now
            self._record(delivery, tries, None, str(exc), DeliveryState.REFUSED)
            return None
        except httpx.TransportError as exc:
            error = f"{type(exc).__name__}: {exc}"
        if error is None:
            self._record(delivery, tries, status, None, DeliveryState.DELIVERED)
            return None
        retryable = status is None or status >= 500 or status == 429
        if retryable and tries <= len(self._settings.backoff):
            self._record(delivery, tries, status, error, DeliveryState.PENDING)
            return self._settings.backoff[tries - 1]
        log.warning("webhook for job %s to %s failed: %s", delivery.job_id, delivery.url, error)
        self._record(delivery, tries, status, error, DeliveryState.FAILED)
        return None

    def _post(self, delivery: Delivery) -> int:
        body = delivery.payload.encode()
        url, headers = self._addressed(delivery, body)
        settings = self._settings
        return post_webhook(
            self._client, url, body, headers, settings.allow_private, deadline=settings.timeout
        )

    def _addressed(self, delivery: Delivery, body: bytes) -> tuple[str, dict[str, str]]:
        """Where the attempt goes and its signature headers: the recorded URL signed
        with thresher's secret, or, for a batch event, its endpoint's URL as it is now
        (an endpoint's update moves its pending retries along) signed with the
        endpoint's secrets (ValueError when the endpoint is gone)."""
        endpoint_id = endpoint_of(delivery.job_id)
        if endpoint_id is None:
            timestamp = str(int(time.time()))
            signature = sign(self._settings.secret, timestamp, body)
            return delivery.url, {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature}
        endpoint = EndpointTable(self._store.db).find(endpoint_id)
        if endpoint is None:
            raise ValueError(f"webhook endpoint {endpoint_id} was deleted")
        event_id = str(json.loads(delivery.payload)["id"])
        return endpoint.url, signed_headers(endpoint, event_id, body, time.time())

    def _record(
        self,
        delivery: Delivery,
        tries: int,
        status: int | None,
        error: str | None,
        state: DeliveryState,
    ) -> None:
        key = (delivery.job_id, delivery.event, delivery.url)
        self._deliveries.record(key, tries, (status, error), state)
        delivery.attempts = tries


_delivery_key = operator.attrgetter("event", "job_id", "url")


def deliveries(db: Database, job_id: str) -> list[dict[str, Any]]:
    """The recorded webhook deliveries of a job (for the API and tests)."""
    return DeliveryTable(db).of_job(job_id)


def start_webhooks(
    state: ServiceState, settings: WebhookSettings | None = None
) -> Callable[[], None]:
    """Deliver `notify.webhook` events for the service: registers the hook on
    `state.on_job_finished`, resumes pending deliveries, and returns the stop function."""
    config = state.config
    if settings is None:
        if not config.webhook_secret:
            raise ValueError("webhook_secret is not set; load the config with load_config()")
        settings = WebhookSettings(
            config.webhook_secret,
            config.webhook_allow_private,
            quarantine_after=config.quarantine_after,
            timeout=config.webhook_timeout,
            workers=config.webhook_workers,
            per_tenant=config.webhook_workers_per_tenant,
        )
    sender = WebhookSender(state.store, settings)
    state.on_job_finished.append(sender.job_finished)
    state.on_tick_missed.append(sender.tick_missed)
    state.on_batch_ended.append(sender.batch_ended)
    sender.resume_pending()
    return sender.close
