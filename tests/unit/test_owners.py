"""Owner liveness on real store rows (SQLite, and PostgreSQL where a test server is
named): an owner on this host is judged by its process, one on another host by the age
of its heartbeat row; the one rule reclaims leases and hands a dead owner's job to one
taker."""

from __future__ import annotations

import os
import time

import pytest

from thresher.spec import JobSpec
from thresher.store import (
    JobState,
    SlotRequest,
    Slots,
    Store,
    StoreError,
    keep_beating,
    this_host,
    this_owner,
)
from thresher.store import _leases as leases_module

GHOST = "ghost-host:4242"  # a server on another host
TIMEOUT = 0.5


def spec() -> JobSpec:
    return JobSpec.model_validate(
        {
            "model": {"kind": "python", "uri": "m.py:M"},
            "source": {"uri": "in.jsonl"},
            "sink": {"uri": "out"},
        }
    )


def outlive_timeout() -> None:
    time.sleep(TIMEOUT + 0.3)


def test_another_hosts_owner_lives_while_its_heartbeat_is_fresh(store: Store) -> None:
    store.owners.timeout = TIMEOUT
    assert not store.owners.alive(GHOST)  # no heartbeat ever: dead
    store.owners.beat(GHOST)
    assert store.owners.alive(GHOST)
    outlive_timeout()
    assert not store.owners.alive(GHOST)
    store.owners.beat(GHOST)  # it beats again: alive again
    assert store.owners.alive(GHOST)


def test_this_hosts_owners_are_judged_by_their_process(store: Store, dead_pid: int) -> None:
    store.owners.timeout = TIMEOUT
    assert store.owners.alive(this_owner())  # no heartbeat row needed
    dead = f"{this_host()}:{dead_pid}"
    store.owners.beat(dead)  # a fresh row does not bring a gone process back
    assert not store.owners.alive(dead)


def test_a_heartbeat_thread_keeps_its_owner_alive_until_stopped(store: Store) -> None:
    store.owners.timeout = TIMEOUT
    stop = keep_beating(store.url, GHOST, every=0.1)
    try:
        outlive_timeout()
        assert store.owners.alive(GHOST)
    finally:
        stop()
    outlive_timeout()
    assert not store.owners.alive(GHOST)


def test_a_dead_remote_owners_lease_is_reclaimed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.owners.timeout = TIMEOUT
    store.owners.beat(GHOST)
    monkeypatch.setattr(leases_module, "this_owner", lambda: GHOST)
    request = SlotRequest(job_id="there", tenant="acme", priority=0, want=2)
    assert store.leases.acquire(request, Slots(2, 0)).granted
    assert store.leases.reclaim_dead() == []  # its heartbeat is fresh
    outlive_timeout()
    assert store.leases.reclaim_dead() == ["there"]
    assert store.leases.held() == []


def test_a_dead_remote_owners_job_is_taken_over_by_one_taker(store: Store) -> None:
    store.owners.timeout = TIMEOUT
    store.owners.beat(GHOST)
    job_id = store.queue_job("j1", spec(), tenant="acme")
    Store(store.db, owner=GHOST).claim(job_id)
    with pytest.raises(StoreError, match=f"being run by {GHOST}"):
        store.claim(job_id)
    outlive_timeout()
    record = store.job(job_id)
    assert record.state == JobState.RUNNING and not store.owners.alive(record.owner)
    takers = [Store(store.db, owner=f"{this_host()}:{pid}") for pid in (os.getpid(), 1)]
    assert [t.take_over(job_id, record.owner) for t in takers] == [True, False]
    assert store.job(job_id).owner == f"{this_host()}:{os.getpid()}"
