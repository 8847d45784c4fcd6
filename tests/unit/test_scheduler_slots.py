"""The scheduler's choices over slots, tenant limits and preemption, with its job
processes left out (launching is recorded instead): who starts, who waits and why, and
whom a higher priority preempts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from thresher.service.background.scheduler import Scheduler
from thresher.service.background.slots import capacity, retry_request
from thresher.service.config import CapacitySettings, ServerConfig, TenantLimits, prepare
from thresher.service.state import ServiceState
from thresher.spec import JobSpec
from thresher.store import JobState, open_store, retry_lease


@pytest.fixture
def scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Scheduler:
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            max_concurrent_jobs=5,
            capacity=CapacitySettings(cpu=2, gpu=0),
            tenants={"acme": TenantLimits(concurrent_jobs=1)},
            min_run_seconds=0,
        )
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    made = Scheduler(ServiceState(store=store, config=config, data_dir=config.data_dir))
    made.launched = []  # type: ignore[attr-defined]

    def launch(record: Any, resume: bool, workers: int | None) -> None:
        made.launched.append((record.id, resume, workers))  # type: ignore[attr-defined]

    monkeypatch.setattr(made, "_launch", launch)
    return made


def queue(
    scheduler: Scheduler, job_spec: Callable[..., JobSpec], job_id: str, tenant: str, **job: Any
) -> None:
    spec = job_spec(job={"name": job_id, **job}, run={"workers": 1})
    scheduler.state.store.queue_job(job_id, spec, tenant)


def test_a_tenant_at_its_limit_waits_and_lets_others_by(
    scheduler: Scheduler, job_spec: Callable[..., JobSpec]
) -> None:
    for job_id, tenant in [("a1", "acme"), ("a2", "acme"), ("g1", "globex")]:
        queue(scheduler, job_spec, job_id, tenant)
    while scheduler._start_next():
        pass
    assert scheduler.launched == [("a1", False, 1), ("g1", False, 1)]  # type: ignore[attr-defined]
    reason = scheduler.state.store.queue.wait_reason("a2")
    assert reason == "tenant limit concurrent_jobs: 1 of 1 of its jobs running"


def test_a_higher_priority_preempts_the_lowest_once(
    scheduler: Scheduler, job_spec: Callable[..., JobSpec]
) -> None:
    store = scheduler.state.store
    queue(scheduler, job_spec, "low", "globex", priority=0)
    queue(scheduler, job_spec, "mid", "globex", priority=2)
    while scheduler._start_next():
        pass
    queue(scheduler, job_spec, "high", "globex", priority=5)
    queue(scheduler, job_spec, "later", "acme", priority=1)
    assert not scheduler._start_next()  # 2 of 2 slots in use
    assert store.queue.wait_reason("high") == "waiting for worker slots: 2 of 2 in use"
    behind = "queued behind a job of priority 5 (waiting for worker slots: 2 of 2 in use)"
    assert store.queue.wait_reason("later") == behind
    assert store.job("low").state == JobState.PREEMPTED
    assert store.job("low").message == "preempted by a job of priority 5; resumes when slots free"
    assert store.job("low").wait_reason == store.job("low").message
    assert not scheduler._start_next()  # low still holds its lease: no second victim
    assert store.job("mid").state == JobState.RUNNING
    store.leases.release("low")  # its coordinator stopped
    assert scheduler._start_next()
    assert scheduler.launched[-1] == ("high", False, 1)  # type: ignore[attr-defined]
    assert [job.id for job in store.queue.waiting()] == ["later", "low"]  # low resumes after


def test_a_retry_round_holds_its_slots_and_is_never_preempted(
    scheduler: Scheduler, job_spec: Callable[..., JobSpec]
) -> None:
    """A round leases its job's slots under a lease of its own: other jobs wait for them,
    a higher priority preempts a real job rather than the round (which has no place in
    the queue to wait in), and a second round of the same job is refused."""
    store, config = scheduler.state.store, scheduler.state.config
    queue(scheduler, job_spec, "nightly", "globex", priority=0)
    assert store.queue.take("nightly")  # its round running, as `retry_errors` claims it
    grant = store.leases.acquire(retry_request(config, store.job("nightly")), capacity(config))
    assert grant.cpu == 1
    queue(scheduler, job_spec, "mid", "globex", priority=1)
    assert scheduler._start_next()  # the other slot
    queue(scheduler, job_spec, "high", "globex", priority=5)
    assert not scheduler._start_next()
    assert store.queue.wait_reason("high") == "waiting for worker slots: 2 of 2 in use"
    assert store.job("mid").state == JobState.PREEMPTED  # not the round, of priority 0
    assert store.job("nightly").state == JobState.RUNNING
    again = store.leases.acquire(retry_request(config, store.job("nightly")), capacity(config))
    assert again.reason == "job nightly.retry already holds a lease"


def test_a_failed_job_whose_round_is_starting_is_not_reopened(
    scheduler: Scheduler, job_spec: Callable[..., JobSpec]
) -> None:
    """Between a round's lease and its process claiming the job, the job is still
    `failed`: resuming it then would run it twice at once, so it waits for the round."""
    store, config = scheduler.state.store, scheduler.state.config
    queue(scheduler, job_spec, "nightly", "globex")
    store.finish("nightly", JobState.FAILED, {}, "too many bad rows")
    grant = store.leases.acquire(retry_request(config, store.job("nightly")), capacity(config))
    assert grant.granted
    (lease,) = store.leases.held()
    assert (lease.job_id, lease.round_of) == (retry_lease("nightly"), "nightly")
    assert not store.queue.reopen("nightly", "resumed by request")
    store.leases.release(retry_lease("nightly"))
    assert store.queue.reopen("nightly", "resumed by request")
    assert store.job("nightly").state == JobState.QUEUED


def test_preempted_is_waiting_not_finished_and_fires_no_webhook() -> None:
    from thresher.notify.events import EVENTS

    assert JobState.PREEMPTED.waiting and not JobState.PREEMPTED.finished
    assert JobState.PREEMPTED not in EVENTS


def test_a_job_is_not_preempted_within_min_run_seconds(
    scheduler: Scheduler, job_spec: Callable[..., JobSpec]
) -> None:
    scheduler.state.config.min_run_seconds = 3600
    queue(scheduler, job_spec, "low", "globex")
    queue(scheduler, job_spec, "low2", "globex")
    while scheduler._start_next():
        pass
    queue(scheduler, job_spec, "high", "globex", priority=5)
    assert not scheduler._start_next()
    assert {scheduler.state.store.job(j).state for j in ("low", "low2")} == {JobState.RUNNING}


def test_a_job_process_sees_only_its_leased_gpus(tmp_path: Path) -> None:
    from thresher.service.background.job_process import pin_leased_gpus
    from thresher.store import SlotRequest, Slots

    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    request = SlotRequest("gpu-job", "acme", 0, want=2, gpu_per_worker=1)
    assert store.leases.acquire(request, Slots(4, 4, ("4", "5", "6", "7"))).granted
    environ = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    pin_leased_gpus(store, "gpu-job", environ)
    assert environ == {"CUDA_VISIBLE_DEVICES": "4,5"}
    untouched = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    pin_leased_gpus(store, "cpu-job", untouched)
    assert untouched == {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
