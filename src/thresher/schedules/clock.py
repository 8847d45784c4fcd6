"""The clock a server's ticker reads: the real one, or one set by `THRESHER_CLOCK` to
rehearse a schedule on a running server (and to test one with real processes).

`THRESHER_CLOCK="2026-12-01T01:59:50+00:00@1764554390.5"` means: at the real Unix time
1764554390.5 the clock reads 01:59:50 UTC, and runs on from there; `...@1764554390.5*12`
runs it 12 times faster. Servers given one value share one time line, across restarts.

    >>> clock = Clock.parse("2026-12-01T01:59:50+00:00@100*12")
    >>> clock.at(105.0).isoformat()
    '2026-12-01T02:00:50+00:00'
    >>> clock.real_seconds(60.0)
    5.0
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["Clock"]


@dataclass(frozen=True)
class Clock:
    origin: datetime | None = None  # None: the real clock
    epoch: float = 0.0  # the real Unix time at which it read `origin`
    rate: float = 1.0

    @classmethod
    def parse(cls, value: str | None) -> Clock:
        """A clock from THRESHER_CLOCK's syntax (empty or None: the real clock)."""
        if not value:
            return cls()
        try:
            instant, _, rest = value.partition("@")
            epoch, _, rate = rest.partition("*")
            origin = datetime.fromisoformat(instant)
            clock = cls(origin.astimezone(UTC), float(epoch), float(rate or 1.0))
        except ValueError:
            raise ValueError(
                f"THRESHER_CLOCK: {value!r} is not ISO-TIME@UNIX-TIME[*RATE]"
            ) from None
        if clock.rate <= 0:
            raise ValueError(f"THRESHER_CLOCK: the rate in {value!r} must be above 0")
        return clock

    @classmethod
    def from_environment(cls) -> Clock:
        return cls.parse(os.environ.get("THRESHER_CLOCK"))

    def now(self) -> datetime:
        return self.at(time.time())

    def at(self, real: float) -> datetime:
        """What the clock reads at the real Unix time `real`."""
        if self.origin is None:
            return datetime.fromtimestamp(real, UTC)
        return self.origin + timedelta(seconds=(real - self.epoch) * self.rate)

    def real_seconds(self, seconds: float) -> float:
        """How many real seconds pass while this clock advances `seconds`."""
        return seconds / self.rate
