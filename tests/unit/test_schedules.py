"""Cron schedules on the real time line, catch-up after downtime, and the tick ledger.

Time is given, never read: every function here takes `now` (or a start instant), so a
test is a fake clock. DST cases are the two the README states, in Europe/Berlin and
America/New_York, for daily and hourly schedules.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from croniter import croniter

from thresher.schedules import Catchup, Cron, CronError, TickFate, due_ticks
from thresher.store import TickOutcome, open_store, tick_key


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def local(cron: Cron, instants: list[datetime]) -> list[str]:
    return [t.astimezone(cron.zone).isoformat(timespec="minutes") for t in instants]


def test_a_daily_time_in_the_spring_gap_fires_when_the_gap_ends() -> None:
    berlin = Cron("30 2 * * *", "Europe/Berlin")  # 02:30 does not exist on 29 March 2026
    assert local(berlin, berlin.after(utc(2026, 3, 28, 12), 3)) == [
        "2026-03-29T03:00+02:00", "2026-03-30T02:30+02:00", "2026-03-31T02:30+02:00",
    ]  # fmt: skip
    new_york = Cron("0 2 * * *", "America/New_York")  # 02:00 does not exist on 8 March
    assert local(new_york, new_york.after(utc(2026, 3, 7, 12), 2)) == [
        "2026-03-08T03:00-04:00", "2026-03-09T02:00-04:00",
    ]  # fmt: skip


def test_a_daily_time_in_the_doubled_hour_fires_once_at_its_first_occurrence() -> None:
    berlin = Cron("30 2 * * *", "Europe/Berlin")  # 02:30 happens twice on 25 October
    assert local(berlin, berlin.after(utc(2026, 10, 24, 12), 2)) == [
        "2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00",
    ]  # fmt: skip
    new_york = Cron("30 1 * * *", "America/New_York")  # 01:30 twice on 1 November
    # Why not croniter over zone-aware times: it fires this daily schedule twice that day.
    aware = croniter("30 1 * * *", datetime(2026, 10, 31, 12, tzinfo=new_york.zone))
    twice = [aware.get_next(datetime).isoformat() for _ in range(2)]
    assert twice == ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00"]
    assert local(new_york, new_york.after(utc(2026, 11, 1, 0), 2)) == [
        "2026-11-01T01:30-04:00", "2026-11-02T01:30-05:00",
    ]  # fmt: skip


def test_an_hourly_schedule_fires_once_per_real_hour_through_both_changes() -> None:
    berlin = Cron("0 * * * *", "Europe/Berlin")
    fall = berlin.between(utc(2026, 10, 24, 22, 30), utc(2026, 10, 25, 3, 30))
    assert [t.hour for t in fall] == [23, 0, 1, 2, 3]  # 02:00 CEST and 02:00 CET both
    spring = berlin.between(utc(2026, 3, 28, 23, 30), utc(2026, 3, 29, 3, 30))
    assert local(berlin, spring) == [
        "2026-03-29T01:00+01:00", "2026-03-29T03:00+02:00",
        "2026-03-29T04:00+02:00", "2026-03-29T05:00+02:00",
    ]  # fmt: skip
    half_hourly = Cron("*/30 * * * *", "America/New_York")
    fall = half_hourly.between(utc(2026, 11, 1, 4, 45), utc(2026, 11, 1, 7, 45))
    assert [b - a for a, b in itertools.pairwise(fall)] == [timedelta(minutes=30)] * 5
    spring = half_hourly.between(utc(2026, 3, 8, 6, 15), utc(2026, 3, 8, 8, 15))
    assert local(half_hourly, spring) == [
        "2026-03-08T01:30-05:00", "2026-03-08T03:00-04:00",
        "2026-03-08T03:30-04:00", "2026-03-08T04:00-04:00",
    ]  # 02:00 and 02:30 do not exist: one tick at the end of the gap  # fmt: skip


def test_the_next_five_fire_times_preview_in_utc() -> None:
    cron = Cron("15 6 * * 1-5", "Europe/Berlin")  # weekdays 06:15 local
    times = cron.after(utc(2026, 12, 4, 12), 5)  # a Friday afternoon
    assert [t.isoformat() for t in times] == [
        "2026-12-07T05:15:00+00:00", "2026-12-08T05:15:00+00:00", "2026-12-09T05:15:00+00:00",
        "2026-12-10T05:15:00+00:00", "2026-12-11T05:15:00+00:00",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("expression", "zone", "field"),
    [
        ("61 * * * *", "UTC", "cron"),
        ("* * * *", "UTC", "cron"),
        ("0 2 * * *", "Mars/Base", "timezone"),
    ],
)
def test_a_bad_expression_or_zone_names_its_field(expression: str, zone: str, field: str) -> None:
    with pytest.raises(CronError, match=f"^{field}: "):
        Cron(expression, zone)


# Catch-up after three hours down: the server saw 00:30, next looks at 03:30 (+20 s).
DOWN, BACK = utc(2026, 1, 1, 0, 30), utc(2026, 1, 1, 3, 30, 20)
HOURLY = Cron("30 * * * *")


def fates(**options: object) -> list[tuple[int, str]]:
    return [(t.hour, f.value) for t, f in due_ticks(HOURLY, DOWN, BACK, **options)]  # type: ignore[arg-type]


def test_catchup_latest_runs_the_newest_tick_only() -> None:
    assert fates(catchup=Catchup.LATEST) == [(1, "missed"), (2, "missed"), (3, "run")]


def test_catchup_all_runs_every_missed_tick_up_to_max_catchup() -> None:
    assert fates(catchup=Catchup.ALL) == [(1, "run"), (2, "run"), (3, "run")]
    # 03:30 is on time (20 s late); of the overdue ones, the newest max_catchup run
    assert fates(catchup=Catchup.ALL, max_catchup=1) == [(1, "missed"), (2, "run"), (3, "run")]


def test_catchup_none_runs_only_a_tick_that_is_on_time() -> None:
    assert fates(catchup=Catchup.NONE) == [(1, "missed"), (2, "missed"), (3, "run")]
    late = due_ticks(HOURLY, DOWN, BACK + timedelta(minutes=5), Catchup.NONE)
    assert [f for _, f in late] == [TickFate.MISSED] * 3  # 03:30 is 5 minutes late now


def test_a_tick_past_its_starting_deadline_is_missed_whatever_the_policy() -> None:
    deadline = timedelta(minutes=90)
    assert fates(catchup=Catchup.ALL, starting_deadline=deadline) == [
        (1, "missed"), (2, "run"), (3, "run"),
    ]  # fmt: skip


def test_a_tick_is_claimed_once_across_stores_and_settled_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    first, second = open_store(url).ticks, open_store(url).ticks
    nominal = utc(2026, 12, 1, 2, 0)
    assert first.claim("nightly", nominal, "host:1") is True
    assert second.claim("nightly", nominal, "host:2") is False  # the other server lost
    assert second.unsettled("nightly") == [(nominal, "host:1")]  # until the winner settles
    first.settle("nightly", nominal, TickOutcome.STARTED, job_id="job-1")
    second.settle("nightly", nominal, TickOutcome.FAILED, message="too late")  # no effect
    (tick,) = second.recent("nightly")
    assert (tick.outcome, tick.job_id, tick.message) == (TickOutcome.STARTED, "job-1", None)
    assert second.unsettled("nightly") == [] and second.last("nightly") == nominal
    assert tick_key("nightly", nominal) == "tick:nightly:2026-12-01T02:00:00+00:00"
