"""Requests per second per token: a token bucket each, so one client's loop (a script
polling without a pause, a retry storm) cannot take the server's threads from the rest.

Each bearer token holds up to `requests_burst` requests and earns `requests_per_second`
more each second (`[tenant_defaults]` or `[tenants.NAME]`); a request past it is a 429
whose `Retry-After` says when the next one is earned. The buckets live in the server's
memory: each of several servers on one store counts its own requests, so a tenant
behind a load balancer of N servers gets up to N times the rate.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

from thresher.service.errors import TooManyRequests

__all__ = ["RequestRates"]


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class RequestRates:
    """The buckets, by token digest; `take` spends one request or refuses it."""

    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, key: str, per_second: float, burst: int, now: float | None = None) -> None:
        """Spend one of `key`'s requests; TooManyRequests (429, Retry-After) when its
        bucket is empty."""
        now = time.monotonic() if now is None else now
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(float(burst), now)
            bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * per_second)
            bucket.at = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return
            wait = (1.0 - bucket.tokens) / per_second
        raise TooManyRequests(
            f"requests_per_second: this token sent more than {per_second:g} a second"
            f" (bursts of {burst}); wait {wait:.2f} s",
            retry_after=math.ceil(wait),
        )
