"""When a failed webhook is tried again: exponential backoff with jitter, for a window of
time from the delivery's creation (24 hours by default: a receiver down for a night, or a
weekend's maintenance window past midnight, still gets its events), and no sooner than a
receiver's `Retry-After` asks.

The waits double from `first` up to `longest` (1 s, 2 s, 4 s, … an hour, then hourly), each
drawn ±25% so that receivers coming back are not hit by every sender at once. A try that
would start past the window is not made: the delivery is recorded failed. The waits are
kept in memory: after a restart the pending deliveries are tried at once, then back off
again from where their tries stand.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["RetryPolicy", "retry_after_seconds"]

JITTER = 0.25


@dataclass(frozen=True)
class RetryPolicy:
    first: float = 1.0  # the wait after the first failed try, in seconds
    longest: float = 3600.0  # no wait is longer (but for a receiver's Retry-After)
    window: float = 24 * 3600.0  # from the delivery's creation; no try starts after it
    jitter: float = JITTER  # each wait drawn within ± this share of itself

    def wait(self, tries: int, age: float, retry_after: float | None = None) -> float | None:
        """The seconds before the next try of a delivery `age` seconds old that failed
        `tries` times, or None when that try would fall outside the window."""
        wait = min(self.first * 2.0 ** (tries - 1), self.longest)
        wait *= random.uniform(1 - self.jitter, 1 + self.jitter)  # spreading, not secrecy
        if retry_after is not None:
            wait = max(wait, retry_after)
        return None if age + wait > self.window else wait


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A `Retry-After` header's wait in seconds (delta-seconds or an HTTP date), None when
    absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)
