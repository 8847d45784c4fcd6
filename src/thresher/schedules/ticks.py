"""When a cron schedule fires, in real (UTC) instants, with daylight-saving time exact.

A schedule is a 5-field cron expression read in an IANA time zone. Its fire times are
found on the zone's wall clock (croniter, over naive local times, where it is right) and
then placed on the real time line by rules of our own, because a wall-clock time can be
missing or doubled there (croniter over zone-aware times repeats or drops the doubled
hour, depending on the version):

- a local time that does not exist (spring forward, 02:30 in Europe/Berlin on the last
  Sunday of March) fires at the first instant after the gap (03:00 local);
- a local time that occurs twice (fall back) fires once, at its first occurrence — unless
  the schedule fires every hour of the day (`0 * * * *`, `*/15 * * * *`), which fires
  once per real elapsed interval, so in both copies of the doubled hour;
- two wall-clock times that land on one instant (a gap time and the first time after the
  gap) fire once.

A valid expression may never fire (`0 0 31 2 *`, 31 February): it has no fire times, and
`after` and `between` say so by returning none, never by raising. `check_fires` refuses
one with no fire time within `FIRE_BOUND` (five years: every cron of five fields that
fires at all fires at least every four, 29 February included), so a schedule is accepted
only if it will run.

    >>> from datetime import datetime, UTC
    >>> s = Cron("30 2 * * *", "Europe/Berlin")
    >>> [t.isoformat() for t in s.after(datetime(2026, 3, 28, 12, tzinfo=UTC), 2)]
    ['2026-03-29T01:00:00+00:00', '2026-03-30T00:30:00+00:00']
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

__all__ = ["FIRE_BOUND", "Cron", "CronError"]

# A schedule must fire within this long of when it is given (29 February: every 4 years).
FIRE_BOUND = timedelta(days=5 * 366)
# The longest IANA zone name is 30 characters; a longer key is not looked up at all (the
# zone database opens a key as a file name: 256 characters fail as OSError, not "not found").
MAX_ZONE_NAME = 64


class CronError(ValueError):
    """A cron expression or time zone that cannot be a schedule."""


@dataclass(frozen=True)
class Cron:
    """A cron expression in a time zone; `after` gives its fire times as UTC instants."""

    expression: str
    timezone: str = "UTC"
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.expression.split()) != 5 or not croniter.is_valid(self.expression):
            raise CronError(f"cron: {self.expression!r} is not a 5-field cron expression")
        if len(self.timezone) > MAX_ZONE_NAME:
            raise CronError(
                f"timezone: an IANA time zone name has at most {MAX_ZONE_NAME} characters"
            )
        try:
            object.__setattr__(self, "zone", ZoneInfo(self.timezone))
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: tzdata's file open
            raise CronError(f"timezone: {self.timezone!r} is not an IANA time zone") from None

    def check_fires(self, now: datetime, bound: timedelta = FIRE_BOUND) -> None:
        """CronError unless the schedule fires within `bound` after `now` (a valid
        expression may name a day that never comes: `0 0 31 2 *`)."""
        upcoming = self.after(now, 1)
        if not upcoming or upcoming[0] - now > bound:
            years = bound.days // 366
            raise CronError(
                f"cron: {self.expression!r} has no fire time in the next {years} years; "
                "check its day of month against its month"
            )

    @property
    def every_hour(self) -> bool:
        """Whether the schedule fires in every hour of the day (its hour field is `*`)."""
        return self.expression.split()[1] in ("*", "*/1")

    def after(self, start: datetime, count: int) -> list[datetime]:
        """The first `count` fire times strictly after the instant `start`, in UTC."""
        times: list[datetime] = []
        for instant in self._instants(start):
            if instant > start and (not times or instant > times[-1]):
                times.append(instant)
                if len(times) == count:
                    break
        return times

    def between(self, start: datetime, end: datetime, limit: int = 100_000) -> list[datetime]:
        """Every fire time in (start, end], in UTC, at most `limit` of them (the newest)."""
        times: list[datetime] = []
        for instant in self._instants(start):
            if instant > end:
                break
            if instant > start and (not times or instant > times[-1]):
                times.append(instant)
                del times[:-limit]
        return times

    def _instants(self, start: datetime) -> Iterator[datetime]:
        """Fire instants from just before `start` on, in order (possibly one repeated).
        A doubled hour's second copies come after later first copies (01:30 EDT before
        01:00 EST), so instants wait in a heap until no later wall time can come before
        them: every instant of a later wall time is at or after its first one."""
        # Begin a day early on the wall clock: a wall time before `start`'s can still
        # land after it on the real line (near a transition).
        local = _wall(start, self.zone) - timedelta(days=1)
        wall_times = croniter(self.expression, local)
        waiting: list[datetime] = []
        while True:
            try:
                wall = wall_times.get_next(datetime)
            except CroniterBadDateError:  # no (further) fire time: a day that never comes
                yield from sorted(waiting)
                return
            placed = list(self._place(wall))
            for instant in placed:
                heapq.heappush(waiting, instant)
            while waiting and waiting[0] <= placed[0]:
                yield heapq.heappop(waiting)

    def _place(self, wall: datetime) -> Iterator[datetime]:
        """The real instants of the wall-clock time `wall`: one, two (a doubled hour, for
        a schedule of every hour), or the end of the gap it falls in."""
        first = wall.replace(tzinfo=self.zone, fold=0)
        second = wall.replace(tzinfo=self.zone, fold=1)
        if _wall(first, self.zone) != wall:  # it does not exist: spring forward
            yield _end_of_gap(second.astimezone(UTC), first.astimezone(UTC), wall, self.zone)
            return
        yield first.astimezone(UTC)
        if first.utcoffset() != second.utcoffset() and self.every_hour:
            yield second.astimezone(UTC)  # the doubled hour's second copy


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    """The naive wall-clock time of an instant in `zone` (through UTC: a datetime already
    in `zone` would come back unchanged, gap times included)."""
    return instant.astimezone(UTC).astimezone(zone).replace(tzinfo=None)


def _end_of_gap(low: datetime, high: datetime, wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant in [low, high] whose wall-clock time is at or past `wall` (the
    instant the clock jumps over it), to the second."""
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if _wall(middle, zone) >= wall:
            high = middle
        else:
            low = middle
    return high.replace(microsecond=0) if _wall(low, zone) < wall else low
