"""Backfills with the real CLI and real `thresher serve` processes: a backfill recorded by
`thresher backfill` is run by the server, one job per fire time; a server killed with
SIGKILL mid-backfill — at each step of starting a fire time's job, or while its jobs
run — is started again and the backfill goes on, no fire time doubled."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from thresher.store import TickOutcome, open_store

from .servers import Server, ServiceSite
from .support import THRESHER

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TODAY = datetime.now(UTC).date()
ACTIVE = ("starting", "queued", "preempted", "running")
FIRST, LAST = TODAY - timedelta(days=10), TODAY - timedelta(days=8)  # three fire times


def backfill_site(root: Path, model: str = "double") -> ServiceSite:
    shared = root / "shared"
    shared.mkdir(parents=True)
    rows = "".join(json.dumps({"id": i, "x": float(i)}) + "\n" for i in range(20))
    (shared / "in.jsonl").write_text(rows)
    source = json.dumps(str(shared / "in.jsonl"))
    job = f'{{ model = "{model}", name = "scores-{{date}}", source = {{ uri = {source} }} }}'
    settings = f"""
[schedules.nightly]
cron = "0 2 * * *"
timezone = "Europe/Berlin"
tenant = "acme"
job = {job}
"""
    return ServiceSite(root, settings=settings, slow_delay=4.0)


def cli(site: ServiceSite, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(THRESHER), "--store", site.store, "backfill", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def start(site: ServiceSite, *more: str) -> dict[str, Any]:
    span = ("--from", FIRST.isoformat(), "--to", LAST.isoformat())
    made = cli(site, "nightly", *span, "--config", str(site.config), "--json", *more)
    assert made.returncode == 0, made.stderr
    return dict(json.loads(made.stdout))


def status(site: ServiceSite, backfill_id: str) -> dict[str, Any]:
    shown = cli(site, "--status", backfill_id, "--json")
    assert shown.returncode in (0, 1), shown.stderr
    return dict(json.loads(shown.stdout))


def wait_for_outcome(site: ServiceSite, backfill_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = status(site, backfill_id)
        if found["outcome"] != "running":
            return found
        time.sleep(0.5)
    raise AssertionError(f"backfill {backfill_id} still running after {timeout} s: {found}")


def assert_each_fire_time_once(site: ServiceSite, done: dict[str, Any]) -> None:
    """Three fire times, three jobs, each its fire time's, each succeeded; no other job."""
    assert done["outcome"] == "succeeded", done
    assert done["progress"]["done"] == done["progress"]["total"] == 3
    store = open_store(site.store)
    jobs = {j.id: j for j in store.jobs(limit=100)}
    ticks = done["ticks"]
    assert sorted(jobs) == sorted(t["job_id"] for t in ticks)
    for tick in ticks:
        job = jobs[tick["job_id"]]
        assert job.spec.job.nominal_time == tick["nominal_time"]
        assert job.name == f"scores-{tick['local_time'][:10]}"
        assert (job.state.value, job.priority) == ("succeeded", -1)  # below the live 0


@pytest.mark.parametrize("point", ["backfill_claiming", "backfill_claimed", "backfill_queued"])
def test_a_server_killed_starting_a_fire_times_job_is_followed_by_one_job(
    tmp_path: Path, point: str
) -> None:
    site = backfill_site(tmp_path)
    doomed = Server(site, env={"THRESHER_FAULT": point})
    made = start(site)  # recorded beside a running server, which takes it up and dies
    assert [t["state"] for t in made["ticks"]] == ["pending"] * 3
    assert doomed.process.wait(30) == -9, doomed.log.read_text()
    store = open_store(site.store)
    first = datetime.fromisoformat(made["ticks"][0]["nominal_time"])
    claim = store.ticks.at("nightly", [first]).get(first)
    if point == "backfill_claiming":  # killed before its claim was committed: none
        assert claim is None
    else:
        assert claim is not None and claim.backfill == made["id"]
        assert claim.outcome == TickOutcome.CLAIMED
    queued = [j.id for j in store.jobs(limit=10)]
    assert len(queued) == (1 if point == "backfill_queued" else 0)
    server = Server(site)
    try:
        done = wait_for_outcome(site, made["id"], timeout=120)
    finally:
        server.stop()
    assert_each_fire_time_once(site, done)
    if queued:  # the job queued before the kill is the fire time's job, not a second
        assert done["ticks"][0]["job_id"] == queued[0]


def test_a_backfill_goes_on_after_its_server_is_killed_while_its_jobs_run(
    tmp_path: Path,
) -> None:
    site = backfill_site(tmp_path, model="slow")
    made = start(site, "--max-running", "1")
    server = Server(site)
    try:
        deadline = time.monotonic() + 60
        while True:  # kill it while its second job runs; never more than one at a time
            states = [t["state"] for t in status(site, made["id"])["ticks"]]
            assert sum(s in ACTIVE for s in states) <= 1, states
            if states[1] == "running":
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.2)
    finally:
        server.kill()
    server = Server(site)
    try:
        done = wait_for_outcome(site, made["id"], timeout=180)
    finally:
        server.stop()
    assert_each_fire_time_once(site, done)
    text = cli(site, "--status", made["id"])
    assert text.returncode == 0 and "succeeded, 3/3 done" in text.stdout, text.stdout


def test_the_cli_refuses_what_cannot_be_backfilled(tmp_path: Path) -> None:
    site = backfill_site(tmp_path)
    config = ("--config", str(site.config))
    span = ("--from", FIRST.isoformat(), "--to", LAST.isoformat())
    unknown = cli(site, "nigthly", *span, *config)
    assert unknown.returncode == 2
    assert "no schedule 'nigthly' (did you mean 'nightly'?)" in unknown.stderr
    later = (TODAY + timedelta(days=3)).isoformat()
    future = cli(site, "nightly", "--from", later, "--to", later, *config)
    assert future.returncode == 2 and "is in the future" in future.stderr
    long_ago = date(TODAY.year - 4, 1, 1).isoformat()
    too_long = cli(site, "nightly", "--from", long_ago, "--to", LAST.isoformat(), *config)
    assert too_long.returncode == 2 and "more than 1000 fire times" in too_long.stderr
    assert cli(site, "--status", "backfill-nope").returncode == 2
    listed = cli(site, "nightly")
    assert listed.returncode == 0 and listed.stdout.strip() == "nightly: no backfills"
