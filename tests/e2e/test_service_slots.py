"""Worker slots, leases and preemption in a real `thresher serve`.

A server killed with SIGKILL leaves its slot leases in the store; the next server sees
their owner is dead and takes the slots back (none leak). A high-priority job that finds
no slot free preempts a low-priority one at a shard boundary; the low one waits as
`preempted`, resumes from its stored plan, and its output is exactly an uninterrupted
run's: every id once, the same predictions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from thresher.store import Store, open_store, this_host

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TWO_SLOTS = "min_run_seconds = 0\n\n[capacity]\ncpu = 2\ngpu = 0\n"


@contextmanager
def store_of(site: ServiceSite) -> Iterator[Store]:
    store = open_store(site.store)
    try:
        yield store
    finally:
        store.db.close()


def write_shards(folder: Path, shards: int, rows: int) -> dict[int, float]:
    """One JSONL file (one shard) per `rows` rows; returns id → x."""
    folder.mkdir()
    xs = {}
    for shard in range(shards):
        ids = range(shard * rows, (shard + 1) * rows)
        xs |= {i: float(i % 7) for i in ids}
        lines = [json.dumps({"id": i, "x": xs[i]}) for i in ids]
        (folder / f"part-{shard:02d}.jsonl").write_text("\n".join(lines) + "\n")
    return xs


def until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/jobs/{job_id}").json())


def results(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    text = client.get(f"/v1/jobs/{job_id}/results").text
    return [json.loads(line) for line in text.splitlines()]


def test_a_killed_servers_slot_leases_are_reclaimed(tmp_path: Path) -> None:
    # Slow enough that the resumed job still runs (at least 3.5 s) while the test looks.
    site = ServiceSite(tmp_path, slow_delay=1.0, settings=TWO_SLOTS)
    token = site.token("acme")
    folder = site.shared / "big"
    write_shards(folder, shards=8, rows=5)
    body = {"source": {"uri": str(folder), "format": "jsonl"}, "model": "slow", "id_column": "id"}

    server = Server(site)
    with server.client(token) as client:
        big = client.post("/v1/jobs", json={**body, "workers": 2}).json()["id"]
        until(lambda: job(client, big)["progress"]["shards_done"] >= 1, "the job got going")
    server.kill()
    with store_of(site) as store:
        (leaked,) = store.leases.held()
    assert (leaked.job_id, leaked.cpu) == (big, 2)
    assert leaked.owner == f"{this_host()}:{server.process.pid}"  # dead now

    restarted = Server(site)
    try:
        with restarted.client(token) as client:
            small = client.post("/v1/jobs", json={**body, "workers": 1}).json()["id"]
            with store_of(site) as store:
                (lease,) = store.leases.held()  # the dead server's lease is gone
                assert lease.job_id == big and lease.cpu == 2
                assert lease.owner == f"{this_host()}:{restarted.process.pid}"
            assert job(client, small)["status"] == "queued"  # 2 of 2 slots in use
            assert wait_for_job(client, big)["status"] == "succeeded"
            assert wait_for_job(client, small)["status"] == "succeeded"
    finally:
        restarted.stop()
    with store_of(site) as store:
        assert store.leases.held() == []  # every slot given back


ONE_SLOT = "min_run_seconds = 0\n\n[capacity]\ncpu = 1\ngpu = 0\n"


def test_a_higher_priority_preempts_a_running_job_which_resumes_exactly_once(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    site = ServiceSite(tmp_path, slow_delay=0.3, settings=ONE_SLOT)
    token = site.token("acme")
    xs = write_shards(site.shared / "low", shards=10, rows=5)
    write_shards(site.shared / "high", shards=1, rows=5)
    low_body = {
        "source": {"uri": str(site.shared / "low"), "format": "jsonl"},
        "model": "slow",
        "id_column": "id",
    }
    high_body = {
        "source": {"uri": str(site.shared / "high"), "format": "jsonl"},
        "model": "double",
        "id_column": "id",
        "priority": 5,
    }
    server = Server(site)
    try:
        with server.client(token) as client:
            low = client.post("/v1/jobs", json=low_body).json()["id"]
            until(lambda: job(client, low)["progress"]["shards_done"] >= 2, "low got going")
            submitted = time.monotonic()
            high = client.post("/v1/jobs", json=high_body).json()["id"]
            seen = until(lambda: job(client, low)["status"] == "preempted", "low preempted")
            assert seen and job(client, high)["status"] in ("queued", "running", "succeeded")
            with store_of(site) as store:
                kept = {s.index for s in store.shards(low) if s.state == "done"}
            until(lambda: job(client, high)["status"] != "queued", "high started")
            latency = time.monotonic() - submitted
            assert wait_for_job(client, high)["status"] == "succeeded"
            assert wait_for_job(client, low, timeout=90)["status"] == "succeeded"
            preempted = results(client, low)
            twin = client.post("/v1/jobs", json=low_body).json()["id"]  # uninterrupted
            assert wait_for_job(client, twin, timeout=90)["status"] == "succeeded"
            uninterrupted = results(client, twin)
            with store_of(site) as store:
                attempts = {s.index: s.attempts for s in store.shards(low)}
                # A job's lease goes back just after its state is final (its process ends).
                until(lambda: store.leases.held() == [], "every lease given back")
    finally:
        server.stop()
    record_property("preemption_latency_s", round(latency, 2))
    print(f"preemption latency (high-priority submission to its start): {latency:.2f} s")
    assert preempted == uninterrupted  # same rows, same order, same predictions
    assert sorted(r["id"] for r in preempted) == sorted(xs)  # every id once
    assert all(r["prediction"] == 2.0 * xs[r["id"]] for r in preempted)
    assert 2 <= len(kept) < 10 and all(attempts[i] == 1 for i in kept)  # committed: kept
    assert "preempted by job" in server.log.read_text()


def test_two_servers_on_one_postgresql_store_share_the_hosts_slots(
    tmp_path: Path, postgres_server: str, pg_schema: str
) -> None:
    from urllib.parse import quote

    site = ServiceSite(tmp_path, slow_delay=0.4, settings=TWO_SLOTS)
    site.store = f"{postgres_server}?options={quote(f'-csearch_path={pg_schema}')}"
    token = site.token("acme")
    bodies = []
    for n in range(4):
        write_shards(site.shared / f"in{n}", shards=3, rows=2)
        source = {"uri": str(site.shared / f"in{n}"), "format": "jsonl"}
        bodies.append({"source": source, "model": "slow", "id_column": "id", "workers": 1})
    first, second = Server(site), Server(site)  # each may run 2 jobs: 4 without the lease
    peak, owners = 0, set()
    try:
        with first.client(token) as one, second.client(token) as two:
            ids = [(one if n % 2 else two).post("/v1/jobs", json=b).json()["id"]
                   for n, b in enumerate(bodies)]  # fmt: skip
            with store_of(site) as store:
                while any(job(one, i)["status"] not in ("succeeded", "failed") for i in ids):
                    held = store.leases.held()
                    peak = max(peak, sum(lease.cpu for lease in held))
                    owners |= {lease.owner for lease in held}
                    time.sleep(0.05)
                until(lambda: store.leases.held() == [], "every lease given back")
            assert [job(one, i)["status"] for i in ids] == ["succeeded"] * 4
    finally:
        first.stop()
        second.stop()
    assert peak == 2  # the host's two slots, never more, across both servers
    assert len(owners) == 2  # and both servers ran jobs
