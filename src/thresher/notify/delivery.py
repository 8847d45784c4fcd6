"""Background delivery with retries: a timer heap feeding a small thread pool.

`RetryingDispatcher` runs `attempt(delivery)` on a pool thread as soon as a delivery is
submitted; when the attempt returns a number of seconds it runs again that much later,
and when it returns None the delivery is over. Nobody who submits ever waits.

The pool's threads are shared fairly: a tenant's deliveries hold at most `per_tenant` of
them at once (`TenantShares`); a due delivery of a tenant at its share waits, in order,
until one of that tenant's attempts ends, so one tenant's slow receiver delays only its
own deliveries. (Each attempt's own length is bounded by its deadline: `attempts.py`.)
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from thresher.notify.shares import TenantShares

log = logging.getLogger("thresher.notify.delivery")


@dataclass
class Delivery:
    """One message for one URL; `attempts` counts the tries made so far, `tenant` is
    whose share of the threads it takes (`""`: the operator's)."""

    job_id: str
    event: str
    url: str
    payload: str
    attempts: int = 0
    tenant: str = ""
    created: float = 0.0  # Unix time the delivery was recorded: its retries' window starts


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    delivery: Delivery = field(compare=False)


Attempt = Callable[[Delivery], float | None]


class RetryingDispatcher:
    """Runs `attempt` for each delivery, again after the delay it returns, until None;
    on `workers` threads, at most `per_tenant` of them (default: all) for one tenant."""

    def __init__(self, attempt: Attempt, workers: int = 4, per_tenant: int | None = None) -> None:
        self._attempt = attempt
        self._shares = TenantShares(min(per_tenant or workers, workers))
        self._waiting: dict[str, deque[Delivery]] = {}  # due, their tenant at its share
        self._heap: list[_Due] = []
        self._seq = itertools.count()
        self._wake = threading.Condition()
        self._stopping = False
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="thresher-webhook")
        self._thread = threading.Thread(
            target=self._dispatch, name="thresher-webhook-timer", daemon=True
        )
        self._thread.start()

    def submit(self, delivery: Delivery, delay: float = 0.0) -> None:
        """Try `delivery` after `delay` seconds."""
        with self._wake:
            heapq.heappush(self._heap, _Due(time.monotonic() + delay, next(self._seq), delivery))
            self._wake.notify()

    def close(self) -> None:
        """Stop: attempts under way finish, nothing new starts."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _dispatch(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and not self._is_due():
                    self._wake.wait(self._heap[0].at - time.monotonic() if self._heap else None)
                if self._stopping:
                    return
                due = heapq.heappop(self._heap)
                if not self._shares.take(due.delivery.tenant):
                    self._waiting.setdefault(due.delivery.tenant, deque()).append(due.delivery)
                    continue
            self._pool.submit(self._run, due.delivery)

    def _is_due(self) -> bool:
        return bool(self._heap) and self._heap[0].at <= time.monotonic()

    def _run(self, delivery: Delivery) -> None:
        try:
            delay = self._attempt(delivery)
        except Exception:  # a bug must not kill the pool thread silently
            log.exception("delivery of %s for job %s failed", delivery.event, delivery.job_id)
            delay = None
        finally:
            self._pass_share(delivery.tenant)
        if delay is not None:
            self.submit(delivery, delay)

    def _pass_share(self, tenant: str) -> None:
        """An attempt of `tenant` ended: its slot goes to the tenant's next waiting
        delivery, or back to the shares."""
        with self._wake:
            waiting = self._waiting.get(tenant)
            if not waiting:
                self._shares.give_back(tenant)
                return
            delivery = waiting.popleft()
            if not waiting:
                del self._waiting[tenant]
        try:
            self._pool.submit(self._run, delivery)
        except RuntimeError:  # closing: it stays pending in the store for the next start
            self._shares.give_back(tenant)
