"""Slot leases and the preemption queue in the store, on SQLite and (when the test server
is up) PostgreSQL: two owners share one host's capacity, a dead owner's slots come back,
another host's do not count, and a preempted job waits until its coordinator let go."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

from thresher.spec import JobSpec
from thresher.store import JobState, SlotRequest, Slots, Store, open_store, this_host
from thresher.store import _leases as leases_module

FOUR = Slots(cpu=4, gpu=0)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        server = request.getfixturevalue("postgres_server")
        schema = request.getfixturevalue("pg_schema")
        parts = urlsplit(server)
        query = f"options={quote(f'-csearch_path={schema}')}"
        url = urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
    store = open_store(url)
    yield store
    store.db.close()


def as_owner(monkeypatch: pytest.MonkeyPatch, owner: str) -> None:
    monkeypatch.setattr(leases_module, "this_owner", lambda: owner)


def ask(job_id: str, want: int, tenant: str = "acme", **more: int | None) -> SlotRequest:
    return SlotRequest(job_id=job_id, tenant=tenant, priority=0, want=want, **more)  # type: ignore[arg-type]


def test_two_live_owners_share_one_hosts_slots(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = this_host()
    as_owner(monkeypatch, f"{host}:{os.getpid()}")
    assert store.leases.acquire(ask("a", 3), FOUR).cpu == 3
    as_owner(monkeypatch, f"{host}:{os.getppid()}")  # another live process: a second server
    partly = store.leases.acquire(ask("b", 3), FOUR)
    assert (partly.cpu, partly.granted) == (1, True)  # what was free, down to the minimum
    refused = store.leases.acquire(ask("c", 2), FOUR)
    assert not refused.granted and refused.reason == "waiting for worker slots: 4 of 4 in use"
    assert store.leases.used() == Slots(4, 0)
    store.leases.release("a")
    assert store.leases.acquire(ask("c", 2), FOUR).cpu == 2
    assert {lease.job_id for lease in store.leases.held()} == {"b", "c"}


def test_a_dead_owners_slots_are_reclaimed_by_the_next_taker(
    store: Store, monkeypatch: pytest.MonkeyPatch, dead_pid: int
) -> None:
    host = this_host()
    as_owner(monkeypatch, f"{host}:{dead_pid}")  # a server killed with SIGKILL
    assert store.leases.acquire(ask("killed", 4), FOUR).cpu == 4
    as_owner(monkeypatch, f"{host}:{os.getpid()}")
    assert store.leases.acquire(ask("next", 4), FOUR).cpu == 4
    assert [lease.job_id for lease in store.leases.held()] == ["next"]


def test_another_hosts_leases_use_that_hosts_slots(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.owners.beat("elsewhere:1")  # a live server there: its heartbeat is fresh
    as_owner(monkeypatch, "elsewhere:1")
    assert store.leases.acquire(ask("there", 4), FOUR).cpu == 4
    as_owner(monkeypatch, f"{this_host()}:{os.getpid()}")
    assert store.leases.acquire(ask("here", 4), FOUR).cpu == 4
    assert store.leases.reclaim_dead() == []
    assert len(store.leases.held()) == 2


def test_a_tenant_cap_refuses_its_jobs_and_says_so(store: Store) -> None:
    assert store.leases.acquire(ask("a1", 2, tenant_cap=3), FOUR).cpu == 2
    capped = store.leases.acquire(ask("a2", 2, tenant_cap=3), FOUR)
    assert capped.cpu == 1  # what is left of its tenant's 3
    over = store.leases.acquire(ask("a3", 1, tenant_cap=3), FOUR)
    assert over.tenant_limited and over.reason == "tenant limit worker_slots: its jobs hold 3 of 3"
    assert store.leases.acquire(ask("g1", 1, tenant="globex"), FOUR).granted


def test_a_tenants_running_jobs_are_capped_under_the_lease_lock(store: Store) -> None:
    assert store.leases.acquire(ask("a1", 1, tenant_jobs=1), FOUR).granted
    over = store.leases.acquire(ask("a2", 1, tenant_jobs=1), FOUR)
    assert over.tenant_limited and over.reason == (
        "tenant limit concurrent_jobs: 1 of 1 of its jobs running"
    )
    assert store.leases.acquire(ask("g1", 1, tenant="globex", tenant_jobs=1), FOUR).granted


def test_gpu_slots_bound_gpu_workers(store: Store) -> None:
    two_gpus = Slots(cpu=8, gpu=2)
    assert store.leases.acquire(ask("a", 3, gpu_per_worker=1), two_gpus).gpu == 2
    refused = store.leases.acquire(ask("b", 1, gpu_per_worker=1), two_gpus)
    assert refused.reason == "waiting for GPU slots: 2 of 2 in use"
    assert store.leases.acquire(ask("cpu-only", 1), two_gpus).granted


def test_each_gpu_job_gets_gpus_of_its_own(store: Store) -> None:
    four_gpus = Slots(cpu=8, gpu=4, devices=("0", "1", "2", "3"))
    first = store.leases.acquire(ask("a", 2, gpu_per_worker=1), four_gpus)
    second = store.leases.acquire(ask("b", 1, gpu_per_worker=1), four_gpus)
    assert (first.devices, second.devices) == (("0", "1"), ("2",))
    assert store.leases.lease("a").devices == ("0", "1")  # type: ignore[union-attr]
    store.leases.release("a")
    assert store.leases.acquire(ask("c", 3, gpu_per_worker=1), four_gpus).devices == ("0", "1", "3")
    assert store.leases.acquire(ask("cpu", 1), four_gpus).devices == ()


def test_a_preempted_job_waits_until_its_lease_is_let_go(
    store: Store, job_spec: Callable[..., JobSpec]
) -> None:
    store.queue_job("low", job_spec(job={"name": "low", "priority": 0}), tenant="acme")
    assert [job.id for job in store.queue.waiting()] == ["low"]
    assert store.leases.acquire(ask("low", 1), FOUR).granted and store.queue.take("low")
    store.set_plan("low", {"shards": [{}, {}], "schema": ""})
    assert [job.id for job in store.queue.running_with_leases()] == ["low"]
    assert store.queue.preempt("low", "preempted by job high of priority 5")
    assert store.heartbeat("low") == JobState.PREEMPTED  # its loop stops at this
    assert store.queue.waiting() == [] and store.queue.stopping() == ["low"]
    store.leases.release("low")  # its coordinator ended
    (waiting,) = store.queue.waiting()
    assert waiting.resume and waiting.state == JobState.PREEMPTED
    assert not store.job("low").state.finished
    assert store.queue.take("low") and store.job("low").state == JobState.RUNNING
    assert not store.queue.preempt("nobody", "x")


def test_a_job_preempted_while_planned_stays_preempted(
    store: Store, job_spec: Callable[..., JobSpec]
) -> None:
    store.queue_job("q", job_spec(job={"name": "q"}), tenant="acme")
    assert store.queue.take("q") and store.queue.preempt("q", "for a higher one")
    store.set_plan("q", {"shards": [{}], "schema": ""})
    assert store.job("q").state == JobState.PREEMPTED
