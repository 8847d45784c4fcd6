"""Background delivery with retries: a timer heap feeding a small thread pool.

`RetryingDispatcher` runs `attempt(delivery)` on a pool thread as soon as a delivery is
submitted; when the attempt returns a number of seconds it runs again that much later,
and when it returns None the delivery is over. Nobody who submits ever waits, and a slow
receiver holds only one of the pool's threads.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

log = logging.getLogger("thresher.service.background.delivery")


@dataclass
class Delivery:
    """One message for one URL; `attempts` counts the tries made so far."""

    job_id: str
    event: str
    url: str
    payload: str
    attempts: int = 0


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    delivery: Delivery = field(compare=False)


Attempt = Callable[[Delivery], float | None]


class RetryingDispatcher:
    """Runs `attempt` for each delivery, again after the delay it returns, until None."""

    def __init__(self, attempt: Attempt, workers: int = 4) -> None:
        self._attempt = attempt
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
            self._pool.submit(self._run, due.delivery)

    def _is_due(self) -> bool:
        return bool(self._heap) and self._heap[0].at <= time.monotonic()

    def _run(self, delivery: Delivery) -> None:
        try:
            delay = self._attempt(delivery)
        except Exception:  # a bug must not kill the pool thread silently
            log.exception("delivery of %s for job %s failed", delivery.event, delivery.job_id)
            return
        if delay is not None:
            self.submit(delivery, delay)
