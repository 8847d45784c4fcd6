"""Scheduled jobs in real `thresher serve` processes, on a shared clock set by
`THRESHER_CLOCK` (so a nightly tick comes seconds after the server starts): a server
killed at each step of a tick and started again makes exactly one job for that tick, and
two servers on one PostgreSQL store make one job per minute of a `* * * * *` schedule."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from thresher.schedules.clock import Clock
from thresher.store import TickOutcome, open_store

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FIRE = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def scheduled_site(root: Path, cron: str, overlap: str = "skip") -> ServiceSite:
    shared = root / "shared"
    shared.mkdir(parents=True)
    rows = "".join(json.dumps({"id": i, "x": float(i)}) + "\n" for i in range(20))
    (shared / "in.jsonl").write_text(rows)
    source = json.dumps(str(shared / "in.jsonl"))
    job = f'{{ model = "double", source = {{ uri = {source} }}, id_column = "id" }}'
    settings = f"""
[schedules.nightly]
cron = "{cron}"
tenant = "acme"
overlap = "{overlap}"
job = {job}
"""
    return ServiceSite(root, settings=settings)


def clock_reaching(fire: datetime, seconds: float, rate: float = 1.0) -> str:
    """A THRESHER_CLOCK value that reaches `fire` `seconds` real seconds from now."""
    origin = fire - timedelta(seconds=seconds * rate)
    return f"{origin.isoformat()}@{time.time()}*{rate}"


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen in {timeout} s")


@pytest.mark.parametrize("point", ["tick_claiming", "tick_claimed", "tick_queued"])
def test_a_server_killed_at_each_step_of_a_tick_makes_one_job_for_it(
    tmp_path: Path, point: str
) -> None:
    site = scheduled_site(tmp_path, "0 2 * * *")
    clock = clock_reaching(FIRE, seconds=8)
    doomed = Server(site, env={"THRESHER_CLOCK": clock, "THRESHER_FAULT": point})
    assert doomed.process.wait(30) == -9, doomed.log.read_text()
    ledger = open_store(site.store).ticks
    claimed = [t.outcome for t in ledger.recent("nightly")]
    assert claimed == ([] if point == "tick_claiming" else [TickOutcome.CLAIMED])
    server = Server(site, env={"THRESHER_CLOCK": clock})
    try:
        with server.client(site.token("acme")) as acme:
            ticks = wait_until(
                lambda: [t for t in ledger.recent("nightly") if t.job_id],
                30,
                "the restarted server finishing the tick",
            )
            (tick,) = ledger.recent("nightly")
            assert (tick.nominal, tick.outcome) == (FIRE, TickOutcome.STARTED)
            job = wait_for_job(acme, ticks[0].job_id)
            assert job["status"] == "succeeded", job
            assert [j["id"] for j in acme.get("/v1/jobs").json()["data"]] == [job["id"]]
            results = acme.get(f"/v1/jobs/{job['id']}/results").text.splitlines()
            assert sorted(json.loads(r)["id"] for r in results) == list(range(20))
    finally:
        server.stop()


def test_a_tick_starts_its_job_moments_after_its_time(tmp_path: Path) -> None:
    site = scheduled_site(tmp_path, "0 2 * * *")
    clock = clock_reaching(FIRE, seconds=6)
    server = Server(site, env={"THRESHER_CLOCK": clock})
    try:
        store = open_store(site.store)
        ledger = store.ticks
        job_id = wait_until(
            lambda: next((t.job_id for t in ledger.recent("nightly") if t.job_id), None),
            30,
            "the tick's job",
        )
        record = store.job(job_id)
        fired = Clock.parse(clock)
        due = fired.epoch + (FIRE - fired.origin).total_seconds()  # type: ignore[operator]
        latency = datetime.fromisoformat(record.created_at).timestamp() - due
        print(f"tick latency, nominal time to job queued: {latency * 1000:.0f} ms")
        assert 0 <= latency < 5.0  # woken at the fire time, not at the next 5 s poll
    finally:
        server.stop()


@pytest.fixture
def pg_store(postgres_server: str, pg_schema: str) -> str:
    return f"{postgres_server}?options={quote(f'-csearch_path={pg_schema}')}"


def test_two_servers_on_one_postgresql_store_make_one_job_per_minute(
    tmp_path: Path, pg_store: str
) -> None:
    """Three minutes and more of `* * * * *` on a clock running 12 times as fast (one
    minute every 5 s), both servers ticking every schedule."""
    site = scheduled_site(tmp_path, "* * * * *", overlap="queue")
    site.store = pg_store
    clock = clock_reaching(FIRE, seconds=6, rate=12)
    servers = [Server(site, env={"THRESHER_CLOCK": clock}) for _ in range(2)]
    try:
        time.sleep(6 + 4 * 5 + 1)  # to 02:04:12 on the schedule's clock
    finally:
        for server in servers:
            server.stop()
    store = open_store(pg_store)
    try:
        ticks = sorted(store.ticks.recent("nightly", limit=100), key=lambda t: t.nominal)
        jobs = store.jobs(limit=100)
    finally:
        store.db.close()
    minutes = [FIRE + timedelta(minutes=m) for m in range(5)]
    started = {t.nominal: t.job_id for t in ticks if t.outcome == TickOutcome.STARTED}
    assert all(m in started for m in minutes), [(t.nominal, t.outcome) for t in ticks]
    assert len(set(started.values())) == len(started)  # one job per minute, none shared
    assert sorted(j.id for j in jobs) == sorted(started.values())
