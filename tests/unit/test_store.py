"""The job store on SQLite: the service's queue, idempotency, claims and counts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from thresher.spec import JobSpec
from thresher.store import JobState, Store, StoreError, open_store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(f"sqlite:///{tmp_path / 'store.db'}")


@pytest.fixture
def spec(job_spec: Callable[..., JobSpec]) -> Callable[[int], JobSpec]:
    return lambda priority=0: job_spec(job={"name": "j", "priority": priority})


def test_queue_runs_higher_priority_first_then_oldest_first(
    store: Store, spec: Callable[[int], JobSpec]
) -> None:
    store.queue_job("a", spec(0))
    store.queue_job("b", spec(5))
    store.queue_job("c", spec(0))
    store.queue_job("d", spec(5))
    order = []
    while (job := store.claim_next_queued()) is not None:
        assert job.state == JobState.RUNNING
        order.append(job.id)
    assert order == ["b", "d", "a", "c"]


def test_an_idempotency_key_returns_the_first_job(
    store: Store, spec: Callable[[int], JobSpec]
) -> None:
    first = store.queue_job("one", spec(), tenant="acme", key="k1")
    again = store.queue_job("two", spec(), tenant="acme", key="k1")
    other_tenant = store.queue_job("three", spec(), tenant="globex", key="k1")
    assert (first, again, other_tenant) == ("one", "one", "three")
    assert [j.id for j in store.jobs()] and {j.tenant for j in store.jobs()} == {"acme", "globex"}


def test_a_queued_job_gets_its_plan_and_shards_when_it_starts(
    store: Store, spec: Callable[[int], JobSpec]
) -> None:
    store.queue_job("q", spec())
    assert store.claim_next_queued() is not None
    store.set_plan("q", {"shards": [{}, {}, {}], "schema": ""})
    job = store.job("q")
    assert job.shard_count == 3 and len(store.shards("q")) == 3


def test_a_job_cancelled_while_it_is_planned_stays_cancelled(
    store: Store, spec: Callable[[int], JobSpec]
) -> None:
    store.queue_job("q", spec())
    assert store.claim_next_queued() is not None
    store.request_cancel("q")
    store.set_plan("q", {"shards": [{}], "schema": ""})
    assert store.job("q").state == JobState.CANCELLED
    assert store.heartbeat("q") == JobState.CANCELLED  # so its loop stops at once


def test_counts_come_from_done_shards_only(store: Store, spec: Callable[[int], JobSpec]) -> None:
    store.create_job("j", "j", spec(), {"shards": [{}, {}]})
    store.attempt_started("j", 0, "a1", 1)
    store.shard_done("j", 0, "a1", (10, 9, 1), 0.5)
    store.attempt_started("j", 1, "a2", 1)
    store.attempt_failed("j", 1, "a2", "boom", final=True)
    totals = store.totals("j")
    assert (totals.shards_done, totals.shards_failed) == (1, 1)
    assert (totals.rows_in, totals.rows_out, totals.rows_error) == (10, 9, 1)


def test_a_live_owner_blocks_a_resume_and_cancel_is_seen_by_the_heartbeat(
    store: Store, spec: Callable[[int], JobSpec]
) -> None:
    store.create_job("j", "j", spec(), {"shards": [{}]})
    with pytest.raises(StoreError, match="being run by"):
        store.claim("j")  # this very process owns it, and it is alive
    assert store.request_cancel("j") == JobState.CANCELLED
    assert store.heartbeat("j") == JobState.CANCELLED
    store.finish("j", JobState.FAILED, None, "late")  # a cancelled job stays cancelled
    assert store.job("j").state == JobState.CANCELLED


def test_an_unknown_job_says_which_store_it_looked_in(store: Store) -> None:
    with pytest.raises(StoreError, match="no job 'nope' in the store"):
        store.job("nope")


def test_a_cancel_never_overwrites_a_job_that_finished_meanwhile(
    store: Store, spec: Callable[[int], JobSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job succeeds between the cancel's look and its write: it stays succeeded."""
    store.create_job("j", "j", spec(), {"shards": [{}]})
    running = store.job("j")
    store.finish("j", JobState.SUCCEEDED, None, None)
    looks = iter([running])  # the first look saw it running; later ones see the store
    real = store.job
    monkeypatch.setattr(store, "job", lambda job_id: next(looks, None) or real(job_id))
    assert store.request_cancel("j") == JobState.SUCCEEDED
    assert store.job("j").state == JobState.SUCCEEDED
