"""Backfills through the whole HTTP app in this process (FastAPI's TestClient, no
background threads): the backfiller and the ticker are driven by hand, so each look is
seen. A backfill makes one job per past fire time that has none, below the live ticks'
priority, skips (and names) fire times that have a job, never doubles one, and keeps
to its `max_running`; the ticker leaves its ticks alone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from thresher.schedules.backfills import (
    MAX_BACKFILL_TICKS,
    BackfillError,
    BackfillOutcome,
    TickState,
    fire_times,
    outcome_of,
)
from thresher.schedules.ticks import Cron
from thresher.service import submission
from thresher.service.app import create_app
from thresher.service.background.backfiller import Backfiller
from thresher.service.background.ticker import Ticker
from thresher.service.config import ServerConfig, prepare
from thresher.service.policies.auth import create_token
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import JobState, TickOutcome, open_store

MODEL = "class M:\n    def predict(self, batch):\n        return {'prediction': batch['x']}\n"
BERLIN = Cron("0 2 * * *", "Europe/Berlin")
NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)


# -- the range, read into fire times -------------------------------------------------


def test_dates_are_read_on_the_schedules_wall_clock_and_the_last_day_is_whole() -> None:
    times = fire_times(BERLIN, "2026-10-24", "2026-10-26", NOW)
    # 02:00 Berlin is 00:00 UTC in summer time (25 October's doubled 02:00 fires at its
    # first copy, still summer time), 01:00 UTC after
    assert [t.isoformat() for t in times] == [
        "2026-10-24T00:00:00+00:00",
        "2026-10-25T00:00:00+00:00",
        "2026-10-26T01:00:00+00:00",
    ]
    assert fire_times(BERLIN, "2026-10-24T02:00", "2026-10-24T02:00", NOW) == times[:1]
    utc = fire_times(BERLIN, "2026-10-24T00:30+00:00", "2026-10-26", NOW)
    assert utc == times[1:]  # an offset is taken as given


@pytest.mark.parametrize(
    ("start", "end", "says"),
    [
        ("2026-11-30", "2026-11-01", "to: '2026-11-01' is before from"),
        ("2026-12-24", "2026-12-31", "from: '2026-12-24' is in the future"),
        ("yesterday", "2026-11-01", "from: 'yesterday' is not an ISO date"),
        ("2026-11-01", "30/11/2026", "to: '30/11/2026' is not an ISO date"),
        ("2026-11-01T03:00", "2026-11-01T04:00", "no past fire time"),
        ("0001-01-01", "2026-11-01", "from: '0001-01-01' is before 1970"),
        ("2026-11-01", "9999-12-31", "to: '9999-12-31' is not an ISO date"),
        ("2026-11-01", "9999-12-31T23:59:59-23:59", "between 1970 and 9998"),
    ],
)
def test_a_range_that_cannot_be_backfilled_is_refused_naming_the_option(
    start: str, end: str, says: str
) -> None:
    with pytest.raises(BackfillError, match=says):
        fire_times(BERLIN, start, end, NOW)


def test_more_fire_times_than_the_bound_are_refused_not_cut() -> None:
    minutely = Cron("* * * * *")
    start = NOW - timedelta(days=2)
    assert len(fire_times(minutely, start.isoformat(), start.isoformat(), NOW)) == 1
    with pytest.raises(BackfillError, match=f"more than {MAX_BACKFILL_TICKS} fire times"):
        fire_times(minutely, start.isoformat(), NOW.isoformat(), NOW)


def test_fire_times_of_the_last_minute_are_left_to_the_ticker() -> None:
    minutely = Cron("* * * * *")
    times = fire_times(minutely, (NOW - timedelta(minutes=5)).isoformat(), "2026-12-05", NOW)
    assert times[-1] == NOW - timedelta(minutes=1)
    assert len(times) == 5


def test_the_outcome_waits_for_every_fire_time_then_says_if_one_failed() -> None:
    done = [TickState.SUCCEEDED, TickState.SKIPPED]
    assert outcome_of([*done, TickState.RUNNING], cancelled=False) == BackfillOutcome.RUNNING
    assert outcome_of(done, cancelled=False) == BackfillOutcome.SUCCEEDED
    assert outcome_of([*done, TickState.FAILED], cancelled=False) == BackfillOutcome.FAILED
    assert outcome_of([TickState.PENDING], cancelled=True) == BackfillOutcome.CANCELLED


# -- through the app ---------------------------------------------------------------------


class Site:
    def __init__(self, tmp_path: Path) -> None:
        (tmp_path / "m.py").write_text(MODEL)
        self.shared = tmp_path / "shared"
        self.shared.mkdir()
        (self.shared / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n')
        nightly = {"cron": "0 2 * * *", "tenant": "acme", "job": self.job()}
        config = prepare(
            ServerConfig(
                data_dir=tmp_path / "data",
                models={"m": ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")},
                allowed_roots=[str(self.shared)],
                schedules={"ops-nightly": nightly},
            )
        )
        self.store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
        self.state = ServiceState(store=self.store, config=config, data_dir=config.data_dir)
        self.tokens = {t: create_token(self.store, t) for t in ("acme", "globex")}
        self.client = TestClient(create_app(self.state, background=False))
        self.backfiller = Backfiller(self.state, self.submit)

    def submit(self, tenant: str, body: Any, key: str, tick: Any) -> str:
        return submission.submit_job(self.state, tenant, body, key, tick)

    def job(self, **fields: Any) -> dict[str, Any]:
        return {"model": "m", "source": {"uri": str(self.shared / "in.jsonl")}, **fields}

    def call(self, method: str, path: str, tenant: str = "acme", **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[tenant]}"}
        return self.client.request(method, path, headers=headers, **kw)

    def schedule(self, name: str = "daily", cron: str = "0 2 * * *", **fields: Any) -> None:
        body = {"name": name, "cron": cron, "timezone": "Europe/Berlin", "job": self.job(**fields)}
        assert self.call("POST", "/v1/schedules", json=body).status_code == 201

    def backfill(self, name: str = "daily", **body: Any) -> dict[str, Any]:
        made = self.call("POST", f"/v1/schedules/{name}/backfills", json=body)
        assert made.status_code == 201, made.text
        return dict(made.json())

    def read(self, backfill_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/v1/backfills/{backfill_id}").json())

    def states(self, backfill_id: str) -> list[str]:
        return [t["state"] for t in self.read(backfill_id)["ticks"]]


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    made = Site(tmp_path)
    with made.client:
        yield made


def test_a_backfill_queues_one_job_per_fire_time_below_the_live_ticks(site: Site) -> None:
    site.schedule(priority=5)
    made = site.backfill(**{"from": "2026-11-01", "to": "2026-11-03"})
    assert made["object"] == "backfill" and made["outcome"] == "running"
    assert made["progress"] == {"done": 0, "total": 3, "fraction": 0.0, "states": {"pending": 3}}
    assert made["ticks"][0]["local_time"] == "2026-11-01T02:00:00+01:00"
    site.backfiller.look()
    ticks = site.read(made["id"])["ticks"]
    assert [t["state"] for t in ticks] == ["queued"] * 3
    jobs = [site.store.job(t["job_id"]) for t in ticks]
    assert [j.priority for j in jobs] == [4, 4, 4]  # one below the schedule's own 5
    assert [j.spec.job.nominal_time for j in jobs] == [t["nominal_time"] for t in ticks]
    site.backfiller.look()  # a second look starts nothing more
    assert len(site.store.jobs(limit=100)) == 3


def test_fire_times_with_a_job_are_skipped_and_missed_ones_are_run(site: Site) -> None:
    site.schedule()
    ledger, key = site.store.ticks, "acme/daily"
    live = datetime(2026, 11, 2, 1, tzinfo=UTC)
    missed = datetime(2026, 11, 3, 1, tzinfo=UTC)
    assert ledger.claim(key, live, "ticker") and ledger.claim(key, missed, "ticker")
    ledger.settle(key, live, TickOutcome.STARTED, job_id="job-live")
    ledger.settle(key, missed, TickOutcome.MISSED, message="too late to run")
    made = site.backfill(**{"from": "2026-11-01", "to": "2026-11-03"})
    skipped = made["ticks"][1]
    assert (skipped["state"], skipped["job_id"]) == ("skipped", "job-live")
    assert skipped["message"] == "already has job job-live (a live tick)"
    site.backfiller.look()
    assert site.states(made["id"]) == ["queued", "skipped", "queued"]
    taken = ledger.at(key, [missed])[missed]
    assert (taken.outcome, taken.backfill) == (TickOutcome.STARTED, made["id"])


def test_a_second_backfill_of_the_same_range_makes_no_second_job(site: Site) -> None:
    site.schedule()
    span = {"from": "2026-11-01", "to": "2026-11-04"}
    first = site.backfill(**span)
    second = site.backfill(**span)  # a retried request, or a second server's
    site.backfiller.look()
    Backfiller(site.state, site.submit).look()
    assert site.states(first["id"]) == ["queued"] * 4
    again = site.read(second["id"])
    assert [t["state"] for t in again["ticks"]] == ["skipped"] * 4
    assert f"(backfill {first['id']})" in again["ticks"][0]["message"]
    assert again["outcome"] == "succeeded"
    assert len(site.store.jobs(limit=100)) == 4


def test_max_running_caps_the_jobs_waiting_or_running_at_once(site: Site) -> None:
    site.schedule()
    made = site.backfill(**{"from": "2026-11-01", "to": "2026-11-05", "max_running": 2})
    site.backfiller.look()
    assert site.states(made["id"]) == ["queued", "queued", "pending", "pending", "pending"]
    first = site.read(made["id"])["ticks"][0]["job_id"]
    site.store.request_cancel(first)  # one ends (cancelled: the backfill will have failed)
    site.backfiller.look()
    states = site.states(made["id"])
    assert states == ["cancelled", "queued", "queued", "pending", "pending"]


def test_a_finished_backfill_ends_with_its_outcome(site: Site) -> None:
    site.schedule()
    made = site.backfill(**{"from": "2026-11-01", "to": "2026-11-02"})
    site.backfiller.look()
    for tick in site.read(made["id"])["ticks"]:
        site.store.finish(tick["job_id"], JobState.SUCCEEDED, None, None)
    site.backfiller.look()
    done = site.read(made["id"])
    assert done["outcome"] == "succeeded" and done["ended_at"] is not None
    assert done["progress"]["fraction"] == 1.0
    assert site.store.backfills.running() == []


def test_cancelling_cancels_the_waiting_jobs_and_starts_no_more(site: Site) -> None:
    site.schedule()
    made = site.backfill(**{"from": "2026-11-01", "to": "2026-11-04", "max_running": 2})
    site.backfiller.look()
    cancelled = site.call("POST", f"/v1/backfills/{made['id']}/cancel").json()
    assert cancelled["outcome"] == "cancelled"
    assert [t["state"] for t in cancelled["ticks"]] == ["cancelled"] * 4
    site.backfiller.look()
    assert len(site.store.jobs(limit=100)) == 2


def test_a_live_tick_is_queued_ahead_of_a_backfills_jobs(site: Site) -> None:
    site.schedule()
    made = site.backfill(**{"from": "2026-11-01", "to": "2026-11-03"})
    site.backfiller.look()
    fire = datetime(2026, 12, 5, 1, tzinfo=UTC)  # 02:00 in Berlin
    Ticker(site.state, site.submit).look(fire + timedelta(seconds=10))
    (live,) = [t for t in site.store.ticks.recent("acme/daily") if t.nominal == fire]
    waiting = [j.id for j in site.store.queue.waiting()]
    assert waiting[0] == live.job_id and len(waiting) == 4  # the live tick first
    ticks = site.call("GET", "/v1/schedules/daily/ticks").json()["data"]
    assert [t["backfill"] for t in ticks] == [None, made["id"], made["id"], made["id"]]


def test_the_ticker_leaves_a_backfills_ticks_alone(site: Site) -> None:
    site.schedule()
    ledger, key = site.store.ticks, "acme/daily"
    made = site.backfill(**{"from": "2026-12-01", "to": "2026-12-04"})
    nominal = datetime(2026, 12, 1, 1, tzinfo=UTC)
    assert ledger.claim_for_backfill(key, nominal, made["id"], "a-dead-server:1")
    Ticker(site.state, site.submit).look(NOW)  # neither finishes its claim nor counts it
    assert ledger.unsettled(key) == [] and ledger.last(key) is None
    assert ledger.at(key, [nominal])[nominal].outcome == TickOutcome.CLAIMED
    site.backfiller.look()  # the backfiller takes the dead server's claim over
    assert site.states(made["id"]) == ["queued"] * 4
    assert ledger.last_job(key) is None  # the overlap policy does not wait for them


def test_backfills_are_the_tenants_own(site: Site) -> None:
    site.schedule()
    made = site.backfill(**{"from": "2026-11-01", "to": "2026-11-01"})
    assert site.call("GET", f"/v1/backfills/{made['id']}", tenant="globex").status_code == 404
    cancel = site.call("POST", f"/v1/backfills/{made['id']}/cancel", tenant="globex")
    assert cancel.status_code == 404
    span = {"from": "2026-11-01", "to": "2026-11-01"}
    other = site.call("POST", "/v1/schedules/daily/backfills", tenant="globex", json=span)
    assert other.status_code == 404
    listed = site.call("GET", "/v1/schedules/daily/backfills").json()["data"]
    assert [b["id"] for b in listed] == [made["id"]]
    config = site.call("POST", "/v1/schedules/ops-nightly/backfills", json=span)
    assert config.status_code == 409  # the operator's: `thresher backfill`


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"from": "2026-01-01", "to": "2026-12-01"}, "more than 1000 fire times"),
        ({"from": "2030-01-01", "to": "2030-01-02"}, "in the future"),
        ({"from": "2026-11-01"}, "to"),
        ({"from": "2026-11-01", "to": "2026-11-02", "max_running": 0}, "max_running"),
    ],
)
def test_a_range_that_cannot_be_backfilled_is_422(
    site: Site, body: dict[str, Any], says: str
) -> None:
    site.schedule(name="hourly", cron="0 * * * *")
    refused = site.call("POST", "/v1/schedules/hourly/backfills", json=body)
    assert refused.status_code == 422 and says in refused.text, refused.text[:300]
    assert site.store.backfills.of_schedule("acme/hourly") == []
