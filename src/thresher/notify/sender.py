"""Sending webhooks: each recorded in the store once per subject, event and URL, then
delivered on background threads with retries, for the service and `thresher run` alike.
What is sent and how it is signed is `events.py` (and `endpoints.py` for a tenant's
OpenAI-style batch events).

Deliveries run on background threads, so the caller never waits on a receiver. They
are retried on connection errors, 429 and 5xx, with exponential backoff and jitter for
24 hours from the event (`retries.py`; a receiver's `Retry-After` honoured); any other
answer ends them. Every message is signed by the Standard Webhooks scheme (`signing.py`).
Each attempt has a wall-clock deadline, all of it (`webhook_timeout`, 10 s: connect,
send and the answer's headers, however slowly the receiver drips them; `attempts.py`),
and an attempt cut at it is retried like a connection error. A tenant's deliveries hold
at most its share of the delivery threads (`webhook_workers_per_tenant` of
`webhook_workers`), so its slow receiver delays only its own webhooks. Each is a row of
`thresher_webhook_deliveries` (job, event, url, attempts, last status, delivered_at);
those still pending when the server stops resume when it starts again.

URL policy (`urls.py`): http or https only, and every address the host
resolves to must be public — loopback, private, link-local, multicast, reserved and
unspecified addresses are refused unless the server sets `webhook_allow_private`. The
jobs API checks at submission; each attempt checks again (DNS may have changed) and then
connects to the very address it checked, with no proxy and no redirects followed.
"""

from __future__ import annotations

import json
import logging
import operator
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx2 as httpx

from thresher.loops import QUARANTINE_AFTER, Strikes, retrying
from thresher.notify.attempts import Answer, post_webhook, webhook_client
from thresher.notify.delivery import Delivery, RetryingDispatcher
from thresher.notify.endpoints import batch_event, endpoint_of, signed_headers, subject
from thresher.notify.events import EVENTS, job_event, tick_event, webhook_of
from thresher.notify.retries import RetryPolicy
from thresher.notify.signing import message_id
from thresher.notify.signing import signed_headers as standard_headers
from thresher.schedules.notice import TickNotice
from thresher.store import BatchRow, DeliveryState, JobRecord, Store, StoreError, tick_key

__all__ = ["RetryPolicy", "WebhookSender", "WebhookSettings"]

log = logging.getLogger("thresher.notify.sender")


@dataclass(frozen=True)
class WebhookSettings:
    """How webhooks are signed and sent. `retry` says when a failed one is tried again,
    `timeout` the wall-clock limit of one whole attempt; `workers` threads deliver, at
    most `per_tenant` of them for one tenant's deliveries."""

    secret: str
    allow_private: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: float = 10.0
    workers: int = 8
    per_tenant: int = 2
    quarantine_after: int = QUARANTINE_AFTER


class WebhookSender:
    """Records and delivers webhooks; `job_finished` is the `on_job_finished` hook."""

    def __init__(self, store: Store, settings: WebhookSettings) -> None:
        self._store, self._settings = store, settings
        self._deliveries = store.deliveries
        self._client = webhook_client()
        strikes, key = Strikes("webhooks", settings.quarantine_after), _delivery_key
        retry = settings.retry  # an attempt that raised (a bug) waits as a failed one does
        crashed = [min(retry.first * 2.0**n, retry.longest) for n in range(4)]
        tried = retrying(strikes, key, self._attempt, self._give_up, crashed)
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
        of its tenant's endpoints that takes it, once per endpoint (`endpoints.py`). An
        endpoint made after the batch ended does not get it (a late announcement, after a
        server died, must not reach one)."""
        event = batch_event(batch)
        if event is None:
            return
        payload = json.dumps(event)
        for endpoint in self._store.webhook_endpoints.subscribed(batch.tenant, event["type"]):
            if endpoint.created_at <= event["created_at"]:
                self._send(subject(endpoint.id, batch.id), event["type"], endpoint.url, payload)

    def _send(self, job_id: str, event: str, url: str, payload: str) -> None:
        if self._deliveries.add(job_id, event, url, payload):
            delivery = Delivery(job_id, event, url, payload, 0, self._owner(job_id), time.time())
            self._dispatcher.submit(delivery)

    def _owner(self, subject: str) -> str:
        """The tenant a delivery is for, whose share of the threads it takes, from its
        subject: an endpoint's tenant, a tenant schedule's (`tick:<tenant>/<name>:…`) or
        a job's; `""` for the operator's (a config schedule, a job with no tenant)."""
        endpoint_id = endpoint_of(subject)
        if endpoint_id is not None:
            endpoint = self._store.webhook_endpoints.find(endpoint_id)
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
        notify = notice.settings.notify
        if notify is None:
            return
        body = tick_event(notice.name, notice.nominal, notice.outcome, notice.message)
        key = tick_key(notice.key, notice.nominal)
        self._send(key, body["event"], notify.on_missed, json.dumps(body))

    def resume_pending(self) -> int:
        """Queue the deliveries a stopped server left pending; returns how many."""
        rows = self._deliveries.pending()
        for job_id, event, url, payload, attempts, created in rows:
            made = datetime.fromisoformat(created).timestamp()
            owner = self._owner(job_id)
            self._dispatcher.submit(Delivery(job_id, event, url, payload, attempts, owner, made))
        return len(rows)

    def redeliver(self, subjects: list[str]) -> int:
        """Send the failed deliveries of these subjects (jobs, `<endpoint>/<batch>`)
        again, each with a new retry window; returns how many."""
        rows = self._deliveries.reopen(subjects)
        made = time.time()
        for subject_, event, url, payload in rows:
            owner = self._owner(subject_)
            self._dispatcher.submit(Delivery(subject_, event, url, payload, 0, owner, made))
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
        answer = Answer(0)
        status: int | None = None
        try:
            answer = self._post(delivery)
            status = answer.status
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
        age = time.time() - delivery.created
        wait = self._settings.retry.wait(tries, age, answer.retry_after) if retryable else None
        if wait is not None:
            self._record(delivery, tries, status, error, DeliveryState.PENDING)
            return wait
        log.warning("webhook for job %s to %s failed: %s", delivery.job_id, delivery.url, error)
        self._record(delivery, tries, status, error, DeliveryState.FAILED)
        return None

    def _post(self, delivery: Delivery) -> Answer:
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
            message = message_id(delivery.job_id, delivery.event)
            return delivery.url, standard_headers([self._settings.secret], message, body)
        endpoint = self._store.webhook_endpoints.find(endpoint_id)
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
