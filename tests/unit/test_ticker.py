"""The ticker over a real store and the real submission path, with a fake clock: each
nominal time makes at most one job, through catch-up, overlap, two tickers on one store
and a ticker that died between queueing a tick's job and recording it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from thresher.service import submission
from thresher.service.background.ticker import Ticker
from thresher.service.config import ConfigError, ServerConfig, prepare
from thresher.service.schedules import check_schedules, set_paused, trigger
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import JobState, TickOutcome, open_store, tick_key

MODEL = "class M:\n    def predict(self, batch):\n        return {'prediction': batch['x']}\n"


def site(tmp_path: Path, **schedule: Any) -> ServiceState:
    (tmp_path / "m.py").write_text(MODEL)
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    (shared / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n')
    job = {"model": "m", "source": {"uri": str(shared / "in.jsonl")}, "id_column": "id"}
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            models={"m": ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")},
            allowed_roots=[str(shared)],
            schedules={"hourly": {"cron": "0 * * * *", "tenant": "acme", "job": job, **schedule}},
        )
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    return ServiceState(store=store, config=config, data_dir=config.data_dir)


def ticker(state: ServiceState) -> Ticker:
    return Ticker(
        state,
        lambda tenant, body, key, tick: submission.submit_job(state, tenant, body, key, tick),
    )


def dead_owner() -> str:
    """A scheduler on this host whose process is gone."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}"


def outcomes(state: ServiceState) -> list[tuple[int, str]]:
    ticks = state.store.ticks.recent("hourly", limit=100)
    return sorted((t.nominal.hour, t.outcome.value) for t in ticks)


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 12, 1, hour, minute, 10, tzinfo=UTC)


def test_a_tick_on_time_starts_one_job_however_often_it_is_looked_at(tmp_path: Path) -> None:
    state = site(tmp_path)
    for _ in range(3):
        ticker(state).look(at(2))
    assert outcomes(state) == [(2, "started")]
    (job,) = state.store.jobs()
    assert job.name == "hourly@2026-12-01T02:00:00+00:00" and job.tenant == "acme"


@pytest.mark.parametrize(
    ("catchup", "expected"),
    [
        ("latest", [(2, "started"), (3, "missed"), (4, "missed"), (5, "started")]),
        ("all", [(2, "started"), (3, "started"), (4, "started"), (5, "started")]),
        ("none", [(2, "started"), (3, "missed"), (4, "missed"), (5, "missed")]),
    ],
)
def test_three_hours_down_are_caught_up_by_the_policy(
    tmp_path: Path, catchup: str, expected: list[tuple[int, str]]
) -> None:
    state = site(tmp_path, catchup=catchup, overlap="queue")
    ticker(state).look(at(2))
    ticker(state).look(at(5, 30))  # back 3.5 hours later: 03:00, 04:00, 05:00 overdue
    assert outcomes(state) == expected


def test_a_tick_while_the_last_run_goes_on_is_skipped(tmp_path: Path) -> None:
    state = site(tmp_path)  # overlap = "skip"; nothing runs the queued jobs here
    for hour in range(2, 10):  # more skipped ticks than a short look back would see
        ticker(state).look(at(hour))
    assert outcomes(state) == [(2, "started")] + [(h, "skipped") for h in range(3, 10)]
    (job,) = state.store.jobs()
    state.store.finish(job.id, JobState.SUCCEEDED, None, None)
    ticker(state).look(at(10))
    assert outcomes(state)[-1] == (10, "started")


def test_replace_cancels_the_running_job_for_the_new_one(tmp_path: Path) -> None:
    state = site(tmp_path, overlap="replace")
    ticker(state).look(at(2))
    ticker(state).look(at(3))
    states = sorted((j.name[-14:-9], j.state) for j in state.store.jobs())
    assert states == [("02:00", JobState.CANCELLED), ("03:00", JobState.QUEUED)]


def test_two_tickers_on_one_store_make_one_job_per_tick(tmp_path: Path) -> None:
    state = site(tmp_path)
    other = ServiceState(
        store=open_store(state.store.url), config=state.config, data_dir=state.data_dir
    )
    ticker(state).look(at(2))
    ticker(other).look(at(2))
    assert len(state.store.jobs()) == 1 and outcomes(state) == [(2, "started")]


def test_a_ticker_that_died_before_recording_its_job_is_finished_with_that_job(
    tmp_path: Path,
) -> None:
    state = site(tmp_path)
    ledger, nominal = state.store.ticks, at(2).replace(second=0)
    assert ledger.claim("hourly", nominal, dead_owner())
    body = {**state.config.schedules["hourly"].job, "name": f"hourly@{nominal.isoformat()}"}
    first = submission.submit_job(state, "acme", body, tick_key("hourly", nominal))
    # ... and it died here, its tick claimed and its job queued but not recorded.
    ticker(state).look(at(2, 1))
    (tick,) = ledger.recent("hourly")
    assert (tick.outcome, tick.job_id) == (TickOutcome.STARTED, first)
    assert len(state.store.jobs()) == 1


def test_a_schedule_that_would_not_make_a_job_is_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    state = site(tmp_path)
    bad = state.config.schedules["hourly"].model_copy(update={"job": {"model": "nope"}})
    config = state.config.model_copy(update={"schedules": {"hourly": bad}})
    with pytest.raises(ConfigError, match=r"schedules\.hourly\.job"):
        check_schedules(config)
    with pytest.raises(ValueError, match="cron: '0 25 \\* \\* \\*'"):
        ServerConfig(schedules={"x": {"cron": "0 25 * * *", "tenant": "a", "job": {}}})


def test_a_claim_of_a_live_scheduler_is_left_to_it(tmp_path: Path) -> None:
    state = site(tmp_path)
    ledger, nominal = state.store.ticks, at(2).replace(second=0)
    assert ledger.claim("hourly", nominal, this_owner_elsewhere())
    ticker(state).look(at(2, 1))
    assert [t.outcome for t in ledger.recent("hourly")] == [TickOutcome.CLAIMED]
    assert state.store.jobs() == []


def test_a_claim_of_a_server_on_another_host_is_taken_over_once_its_heartbeat_is_old(
    tmp_path: Path,
) -> None:
    state = site(tmp_path)
    state.store.owners.timeout = 0.3
    ledger, nominal = state.store.ticks, at(2).replace(second=0)
    state.store.owners.beat("other-host:7")
    assert ledger.claim("hourly", nominal, "other-host:7")
    ticker(state).look(at(2, 1))
    assert [t.outcome for t in ledger.recent("hourly")] == [TickOutcome.CLAIMED]  # alive
    time.sleep(0.5)  # its heartbeat stops: that server died
    ticker(state).look(at(2, 2))
    assert [t.outcome for t in ledger.recent("hourly")] == [TickOutcome.STARTED]
    assert len(state.store.jobs()) == 1


def this_owner_elsewhere() -> str:
    """A scheduler in another live process of this host (this test's parent)."""
    return f"{socket.gethostname()}:{os.getppid()}"


def test_a_scheduled_job_gets_its_fire_time_in_its_body_and_spec(tmp_path: Path) -> None:
    state = site(tmp_path, timezone="Europe/Berlin")
    shared = Path(state.config.allowed_roots[0])
    (shared / "2026-12-02").mkdir()
    (shared / "2026-12-02" / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n')
    job = {**state.config.schedules["hourly"].job, "name": "scores-{nominal_time}"}
    job["source"] = {"uri": str(shared / "{date}" / "in.jsonl")}
    hourly = state.config.schedules["hourly"].model_copy(update={"job": job})
    state.config = state.config.model_copy(update={"schedules": {"hourly": hourly}})
    ticker(state).look(datetime(2026, 12, 1, 23, 0, 10, tzinfo=UTC))  # 00:00 in Berlin
    (record,) = state.store.jobs()
    assert record.name == "scores-20261201T230000Z"
    assert record.spec.source.uri.endswith("2026-12-02/in.jsonl")
    assert (record.spec.job.schedule, record.spec.job.nominal_time) == (
        "hourly",
        "2026-12-01T23:00:00+00:00",
    )


def test_a_paused_schedule_skips_its_ticks_and_resumes_from_the_next(tmp_path: Path) -> None:
    state = site(tmp_path, overlap="queue")
    ticker(state).look(at(2))
    set_paused(state.config, state.store, "hourly", True)
    ticker(state).look(at(3))
    ticker(state).look(at(4))
    set_paused(state.config, state.store, "hourly", False)
    ticker(state).look(at(5))
    assert outcomes(state) == [(2, "started"), (3, "skipped"), (4, "skipped"), (5, "started")]
    assert len(state.store.jobs()) == 2


def test_a_manual_tick_runs_now_even_paused_and_leaves_the_cron_alone(tmp_path: Path) -> None:
    state = site(tmp_path, overlap="queue", paused=True)
    manual = trigger(state.config, state.store, "hourly", at(2, 30))
    ticker(state).look(at(2, 30))
    (record,) = state.store.jobs()
    (tick,) = state.store.ticks.recent("hourly")
    assert (tick.nominal, tick.manual, tick.job_id) == (manual, True, record.id)
    set_paused(state.config, state.store, "hourly", False)
    ticker(state).look(at(3))  # the cron's 03:00 tick is not hidden by the 02:30 manual one
    assert [t.outcome.value for t in state.store.ticks.recent("hourly")] == [
        "started",
        "started",
    ]


def test_a_tenants_schedule_in_the_store_ticks_under_its_own_key(tmp_path: Path) -> None:
    state = site(tmp_path)
    config_one = state.config.schedules["hourly"]
    mine = config_one.model_copy(update={"tenant": "globex", "cron": "30 * * * *"})
    state.store.schedules.create("globex", "hourly", mine.model_dump_json())
    ticker(state).look(at(2, 30))
    keys = {j.spec.job.schedule: j.tenant for j in state.store.jobs()}
    assert keys == {"globex/hourly": "globex"}
    assert [t.outcome for t in state.store.ticks.recent("globex/hourly")] == [TickOutcome.STARTED]


def test_missed_and_failed_ticks_are_told_once(tmp_path: Path) -> None:
    state = site(tmp_path, catchup="none", overlap="queue")
    told: list[tuple[int, str, str | None]] = []
    state.on_tick_missed.append(lambda n: told.append((n.nominal.hour, n.outcome, n.message)))
    ticker(state).look(at(2))
    ticker(state).look(at(4, 30))  # 03:00 and 04:00 overdue: missed under catchup = none
    ticker(state).look(at(4, 30))
    assert told == [(3, "missed", "too late to run"), (4, "missed", "too late to run")]
    (Path(state.config.allowed_roots[0]) / "in.jsonl").unlink()  # the 05:00 job cannot start
    ticker(state).look(at(5))
    assert told[-1][:2] == (5, "failed") and "in.jsonl" in str(told[-1][2])
