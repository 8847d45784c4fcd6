"""Background loops, supervised: a daemon thread that runs one pass after another until
its stop is called, and survives whatever a pass or one object in it raises.

The server's heartbeat, ticker, watcher, request buffer, batch worker, webhook timer and
job scheduler each run one. A loop is a `step`: one pass over its objects, returning the
seconds to wait before the next. The supervisor here is the only place that handles a
loop's failures, at two levels:

- **An object** (one tenant's schedule, batch, trigger, buffered batch or delivery) is
  tried through the loop's `Strikes`: its exception is caught at that object, logged with
  its id and counted, and the `limit`-th failure in a row quarantines it (the loop's own
  `quarantine` action: a schedule or trigger paused with the reason, a batch failed with
  it in `errors.data`, a delivery recorded failed), so the pass goes on with the rest and
  one bad object never stops another tenant's work. Failures of the store itself (a busy
  database: every object would meet it alike) are logged but not counted.
- **A pass** that raises anyway (a bug, the store unreadable) is restarted by the
  supervisor after a backoff (1, 2, 4, … up to `MAX_BACKOFF` seconds), on the same
  thread, for as long as the loop runs. Each loop's health (its last successful pass,
  failures in a row, restarts, last error) is kept in a `LoopRegistry`, which `/healthz`
  reads: a loop whose last pass failed, or whose pass has run longer than `STALE_AFTER`,
  makes the server `degraded`.

The stop sets the loop's `stopping` event, and its `wake` event too when it waits on
one of its own (so it ends at once, not at its next timeout), and joins the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

__all__ = [
    "PATIENCE_SECONDS",
    "QUARANTINE_AFTER",
    "LoopHealth",
    "LoopRegistry",
    "Strikes",
    "patience",
    "retrying",
    "start_loop",
    "store_trouble",
]

log = logging.getLogger("thresher.loops")

T = TypeVar("T")

# An object that fails this many passes in a row is quarantined (the server's
# `quarantine_after` setting).
QUARANTINE_AFTER = 5
# The longest wait before a failed pass is run again.
MAX_BACKOFF = 60.0
# A pass under way this long counts as hung: the server reports itself degraded.
STALE_AFTER = 600.0
# A step that runs longer than this says what it is doing (a model's first load).
PATIENCE_SECONDS = 1.0


@contextmanager
def patience(doing: str, logger: logging.Logger) -> Iterator[None]:
    """Log `doing...` at WARNING (which a terminal shows) once the block has run
    PATIENCE_SECONDS, from a timer thread, so a long first load or compile never looks
    hung; nothing is said if it ends sooner."""
    timer = threading.Timer(PATIENCE_SECONDS, logger.warning, (f"{doing}...",))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def store_trouble(exc: BaseException) -> bool:
    """Whether `exc` is the store's trouble rather than the object's: the store error
    thresher raises, or a DB-API `OperationalError` (SQLite's "database is locked", a
    PostgreSQL connection lost). Every object would meet it alike, so it quarantines none."""
    from thresher.errors import StoreError

    if isinstance(exc, StoreError):
        return True
    return any(cls.__name__ == "OperationalError" for cls in type(exc).__mro__)


class Strikes:
    """One loop's count of each object's failures in a row, and its quarantine.

    `attempt(key, action, quarantine)` runs `action()`; an exception is logged with the
    object's `key` and counted, and at the `limit`-th in a row `quarantine(reason)` is
    called (once; the count starts again if the object is ever tried afresh). A success
    clears the count."""

    def __init__(self, loop: str, limit: int = QUARANTINE_AFTER) -> None:
        self.loop, self.limit = loop, max(1, limit)
        self.failures: dict[Hashable, int] = {}
        self.failed_total = 0
        self.quarantined_total = 0
        self._lock = threading.Lock()  # the delivery pool strikes from several threads

    def attempt(
        self, key: Hashable, action: Callable[[], T], quarantine: Callable[[str], object]
    ) -> T | None:
        """`action()`'s result, or None when it raised (then counted, maybe quarantined)."""
        try:
            result = action()
        except Exception as exc:
            self.failed(key, exc, quarantine)
            return None
        self.succeeded(key)
        return result

    def succeeded(self, key: Hashable) -> None:
        with self._lock:
            self.failures.pop(key, None)

    def failed(self, key: Hashable, exc: Exception, quarantine: Callable[[str], object]) -> bool:
        """Count `exc` against `key` (logged); True when this quarantined it."""
        if store_trouble(exc):
            log.warning("%s: %s could not be handled now (the store): %s", self.loop, key, exc)
            return False
        with self._lock:
            count = self.failures[key] = self.failures.get(key, 0) + 1
            self.failed_total += 1
        log.error(
            "%s: %s failed (%d of %d in a row before quarantine)",
            self.loop, key, count, self.limit, exc_info=exc,
        )  # fmt: skip
        if count < self.limit:
            return False
        reason = f"quarantined after {count} failures in a row: {type(exc).__name__}: {exc}"
        try:
            quarantine(reason[:2000])
        except Exception:
            log.exception("%s: %s could not be quarantined now", self.loop, key)
            return False
        with self._lock:
            self.failures.pop(key, None)
            self.quarantined_total += 1
        log.error("%s: %s is quarantined: %s", self.loop, key, reason)
        return True


def retrying(
    strikes: Strikes,
    key: Callable[[T], Hashable],
    attempt: Callable[[T], float | None],
    give_up: Callable[[T, str], object],
    waits: Sequence[float],
) -> Callable[[T], float | None]:
    """`attempt` (one try at an object: the seconds to the next, None when it is over)
    with its exceptions caught at the object, as a pool that retries runs it: one that
    raises is counted and tried again after `waits` (the n-th failure in a row waits the
    n-th, or the last), until the `limit`-th in a row calls `give_up(obj, reason)`."""

    def tried(obj: T) -> float | None:
        try:
            delay = attempt(obj)
        except Exception as exc:
            if strikes.failed(key(obj), exc, partial(give_up, obj)):
                return None
            count = strikes.failures.get(key(obj), 1)
            return (list(waits) or [1.0])[min(count, len(waits) or 1) - 1]
        strikes.succeeded(key(obj))
        return delay

    return tried


@dataclass
class LoopHealth:
    """What `/healthz` says of one loop."""

    name: str
    last_success: float | None = None  # Unix time a pass last ended well
    failures: int = 0  # passes failed in a row (the loop waits to run again)
    restarts: int = 0  # passes failed since the loop started
    last_error: str | None = None
    pass_started: float | None = None  # a pass under way since

    def degraded(self, clock: float) -> bool:
        """Whether the loop's last pass failed, or the one under way has hung."""
        hung = self.pass_started is not None and clock - self.pass_started > STALE_AFTER
        return self.failures > 0 or hung

    def public(self, clock: float) -> dict[str, Any]:
        def iso(t: float | None) -> str | None:
            return None if t is None else datetime.fromtimestamp(t, UTC).isoformat()

        return {
            "status": "degraded" if self.degraded(clock) else "ok",
            "last_success": iso(self.last_success),
            "failures": self.failures,
            "restarts": self.restarts,
            "last_error": self.last_error,
        }


class LoopRegistry:
    """The loops one server runs and how each is doing (what `/healthz` reports)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loops: dict[str, LoopHealth] = {}

    def add(self, name: str) -> LoopHealth:
        with self._lock:
            health = self._loops[name] = LoopHealth(name)
        return health

    def remove(self, health: LoopHealth) -> None:
        with self._lock:
            if self._loops.get(health.name) is health:
                del self._loops[health.name]

    def degraded(self) -> bool:
        clock = time.time()
        with self._lock:
            return any(h.degraded(clock) for h in self._loops.values())

    def report(self) -> dict[str, dict[str, Any]]:
        """Each loop's health, by name (`thresher-` left off)."""
        clock = time.time()
        with self._lock:
            return {
                name.removeprefix("thresher-"): h.public(clock)
                for name, h in sorted(self._loops.items())
            }


def start_loop(
    name: str,
    step: Callable[[], float],
    wake: threading.Event | None = None,
    registry: LoopRegistry | None = None,
) -> Callable[[], None]:
    """Run `step()` over and over on a daemon thread called `name`, waiting the seconds
    each returns (on `wake` when given, which is cleared before each pass, so a `set`
    during a pass runs the next at once); a pass that raises is logged and run again
    after a backoff. Its health is kept in `registry` (a private one when None).
    Returns its stop."""
    stopping = threading.Event()
    health = (registry or LoopRegistry()).add(name)
    waiter = wake or stopping

    def supervise() -> None:
        while not stopping.is_set():
            if wake is not None:
                wake.clear()
            health.pass_started = time.time()
            try:
                wait = step()
            except Exception as exc:
                wait = _failed(name, health, exc)
                health.pass_started = None
                stopping.wait(wait)  # not `wake`: a pass that fails is not run hot
                continue
            health.pass_started = None
            health.last_success, health.failures = time.time(), 0
            waiter.wait(max(wait, 0.0))

    thread = threading.Thread(target=supervise, name=name, daemon=True)
    thread.start()

    def stop() -> None:
        stopping.set()
        if wake is not None:
            wake.set()
        thread.join()
        if registry is not None:
            registry.remove(health)

    return stop


def _failed(name: str, health: LoopHealth, exc: Exception) -> float:
    """Record a pass that raised; the seconds to wait before running it again."""
    health.failures += 1
    health.restarts += 1
    health.last_error = f"{type(exc).__name__}: {exc}"[:500]
    backoff = min(MAX_BACKOFF, 2.0 ** (health.failures - 1))
    log.error(
        "loop %s failed (%d in a row); restarting it in %.0f s", name, health.failures, backoff,
        exc_info=exc,
    )  # fmt: skip
    return backoff
