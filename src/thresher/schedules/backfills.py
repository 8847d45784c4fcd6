"""Backfills: a schedule's past fire times, run on request, each once.

`thresher backfill nightly --from 2026-11-01 --to 2026-11-30` (or `POST
/v1/schedules/{name}/backfills`) covers every fire time of the schedule's cron in
[from, to] — the dates and times read on the schedule's own wall clock — and asks for one
job per fire time that has none yet. This module holds what is the same wherever a
backfill is made or shown: the range read into fire times (bounded, past only), and the
state of each fire time and of the whole, told from the tick ledger and the jobs.

    >>> from datetime import datetime, UTC
    >>> cron = Cron("0 2 * * *", "Europe/Berlin")
    >>> now = datetime(2026, 12, 5, tzinfo=UTC)
    >>> times = fire_times(cron, "2026-11-01", "2026-11-03", now)
    >>> [t.isoformat() for t in times]
    ['2026-11-01T01:00:00+00:00', '2026-11-02T01:00:00+00:00', '2026-11-03T01:00:00+00:00']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from enum import StrEnum

from thresher.schedules.ticks import Cron

__all__ = [
    "MAX_BACKFILL_TICKS",
    "TICKER_GRACE",
    "BackfillError",
    "BackfillOutcome",
    "Progress",
    "TickState",
    "fire_times",
    "outcome_of",
    "progress_of",
    "read_moment",
]

# The most fire times one backfill covers: a longer range is refused, not cut (split it).
MAX_BACKFILL_TICKS = 1000
# Instants a range may name: far enough from datetime's ends that a day either side of
# them (the cron's wall-clock search) is still a datetime.
EARLIEST, LATEST = datetime(1970, 1, 1), datetime(9999, 1, 1)
# Fire times this recent are the live ticker's to decide (its catch-up grace), never a
# backfill's: a backfill that took one would run a live tick at a backfill's priority.
TICKER_GRACE = timedelta(minutes=1)


class BackfillError(ValueError):
    """A range that cannot be backfilled: unreadable, reversed, in the future, empty or
    too long. The message names the option (`from`, `to`) and what to do."""


class TickState(StrEnum):
    """Where one fire time of a backfill stands."""

    PENDING = "pending"  # no job yet: waits for its turn (or for `max_running`)
    STARTING = "starting"  # claimed in the ledger, its job being queued
    QUEUED = "queued"
    PREEMPTED = "preempted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # its job failed, or could not be made (message says why)
    CANCELLED = "cancelled"  # its job was cancelled, or the backfill was before it began
    SKIPPED = "skipped"  # the fire time already had a job (a live tick's, another backfill's)

    @property
    def done(self) -> bool:
        return self in _DONE


_DONE = frozenset({TickState.SUCCEEDED, TickState.FAILED, TickState.CANCELLED, TickState.SKIPPED})


class BackfillOutcome(StrEnum):
    RUNNING = "running"  # some fire time is not done
    SUCCEEDED = "succeeded"  # every fire time's job succeeded (or it had one already)
    FAILED = "failed"  # every fire time is done, and some tick failed
    CANCELLED = "cancelled"  # cancelled by request (its running jobs may still end)


def read_moment(text: str, cron: Cron, *, end: bool, option: str) -> datetime:
    """An ISO date or date-time read on the schedule's wall clock (one with an offset is
    taken as given). A bare date is the start of that day for `from` and its end for `to`,
    so `--to 2026-11-30` includes the 30th."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            wall = datetime.combine(day + timedelta(days=1) if end else day, time())
            instant = wall.replace(tzinfo=cron.zone)
            return instant - timedelta(microseconds=1) if end else instant
        moment = datetime.fromisoformat(text)
        if not EARLIEST <= moment.replace(tzinfo=None) <= LATEST:
            raise ValueError(text)
    except (ValueError, OverflowError):  # OverflowError: a day after 9999-12-31
        raise BackfillError(
            f"{option}: {text!r} is not an ISO date (2026-11-01) or date-time"
            " (2026-11-01T02:00) between 1970 and 9998"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=cron.zone)


def fire_times(
    cron: Cron, start: str, end: str, now: datetime, limit: int = MAX_BACKFILL_TICKS
) -> list[datetime]:
    """The cron's fire times in [start, end] (UTC instants, oldest first), refusing a
    reversed range, one that begins in the future, and one of more than `limit` fire
    times. Fire times after `now - TICKER_GRACE` are left out: they are the ticker's."""
    first = read_moment(start, cron, end=False, option="from")
    last = read_moment(end, cron, end=True, option="to")
    if first.replace(tzinfo=None) < EARLIEST:
        raise BackfillError(f"from: {start!r} is before {EARLIEST.year}")
    if last < first:
        raise BackfillError(f"to: {end!r} is before from {start!r}")
    if first > now:
        raise BackfillError(
            f"from: {start!r} is in the future; a backfill runs past fire times only"
            " (the schedule's ticker runs the ones to come)"
        )
    last = min(last, now - TICKER_GRACE)
    times = [t for t in cron.after(first - timedelta(microseconds=1), limit + 1) if t <= last]
    if len(times) > limit:
        raise BackfillError(
            f"from: {start!r} to {end!r} holds more than {limit} fire times of"
            f" {cron.expression!r}; split it into backfills of {limit} or fewer"
        )
    if not times:
        raise BackfillError(
            f"from: no past fire time of {cron.expression!r} ({cron.timezone}) lies in"
            f" [{start}, {end}]"
        )
    return times


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    states: dict[str, int]


def progress_of(states: Sequence[TickState]) -> Progress:
    """How many fire times are done, of how many, and how many are in each state."""
    counts = Counter(s.value for s in states)
    return Progress(sum(1 for s in states if s.done), len(states), dict(sorted(counts.items())))


def outcome_of(states: Sequence[TickState], cancelled: bool) -> BackfillOutcome:
    """The backfill's outcome: cancelled by request; running while a fire time is not
    done; then failed if one failed or had its job cancelled, else succeeded."""
    if cancelled:
        return BackfillOutcome.CANCELLED
    if not all(s.done for s in states):
        return BackfillOutcome.RUNNING
    if any(s in (TickState.FAILED, TickState.CANCELLED) for s in states):
        return BackfillOutcome.FAILED
    return BackfillOutcome.SUCCEEDED
