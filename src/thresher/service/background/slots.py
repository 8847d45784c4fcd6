"""What the scheduler asks of the lease table for a job, and whom it preempts.

A job asks for the worker slots its `[run] workers` names (the server's, or the
submission's `workers`), or every slot of the machine when it names none, and starts
with what is free down to `capacity.min_workers`. When the server's `[run]` places
workers on GPUs, each worker also takes one GPU slot: a GPU of its own, which the job's
coordinator makes the only ones its workers see (`CUDA_VISIBLE_DEVICES`).

A retry round (`POST /v1/jobs/{id}/retry-errors`) takes its job's slots the same way,
under a lease of its own, or is refused (429) while they are not free.

Preemption, when the job that should start next cannot (no slots, or
`max_concurrent_jobs` running): the running job on this host with the lowest priority
below the waiting job's, ties broken by the least uncommitted work (fewest shards in
flight), and never one that (re)started less than `min_run_seconds` ago. One
preemption at a time: while a preempted job is still stopping, nobody else is asked to.
"""

from __future__ import annotations

from datetime import UTC, datetime

from thresher.plan.devices import visible_gpus
from thresher.service.config import ServerConfig
from thresher.store import (
    JobRecord,
    RunningJob,
    SlotRequest,
    Slots,
    WaitingJob,
    owner_host,
    retry_lease,
    this_host,
)

__all__ = [
    "capacity",
    "choose_victim",
    "gpu_per_worker",
    "retry_request",
    "slot_request",
]


def capacity(config: ServerConfig) -> Slots:
    """This host's slots, its GPU slots named by the GPUs visible here (their first
    `capacity.gpu`; `0` … `gpu - 1` when fewer are visible)."""
    gpus = config.capacity.gpu
    visible = visible_gpus()
    devices = visible[:gpus] if len(visible) >= gpus else [str(i) for i in range(gpus)]
    return Slots(config.capacity.cpu, gpus, tuple(devices))


def gpu_per_worker(config: ServerConfig) -> int:
    """1 when the server's jobs run their workers on GPUs (one each), else 0."""
    run = config.run
    uses_gpus = run.device == "cuda" or (run.device == "auto" and config.capacity.gpu > 0)
    return 1 if uses_gpus and run.executor == "local" else 0


def slot_request(config: ServerConfig, job: WaitingJob) -> SlotRequest:
    limits = config.limits(job.tenant) if job.tenant else None
    want = min(job.workers or config.capacity.cpu, config.capacity.cpu)
    return SlotRequest(
        job_id=job.id,
        tenant=job.tenant,
        priority=job.priority,
        want=want,
        minimum=min(config.capacity.min_workers, want),
        gpu_per_worker=gpu_per_worker(config),
        tenant_cap=limits.worker_slots if limits else None,
        tenant_jobs=limits.concurrent_jobs if limits else None,
    )


def retry_request(config: ServerConfig, record: JobRecord) -> SlotRequest:
    """What a retry round of finished job `record` asks: its job's workers, as the job
    itself would, under `retry_lease` — a lease no job row joins, so its slots and its
    tenant's `concurrent_jobs` count while the round runs, and the scheduler never
    picks it to preempt (a round has no queue place to wait in; it would be lost)."""
    waiting = WaitingJob(
        retry_lease(record.id), record.tenant, record.priority, record.state,
        record.spec.run.workers,
    )  # fmt: skip
    return slot_request(config, waiting)


def choose_victim(
    waiting: WaitingJob,
    running: list[RunningJob],
    min_run_seconds: float,
    now: datetime | None = None,
) -> RunningJob | None:
    """The running job to preempt for `waiting`, or None.

    >>> from thresher.store import JobState
    >>> job = WaitingJob("hi", "a", 5, JobState.QUEUED, 1)
    >>> at = datetime(2026, 1, 1, tzinfo=UTC)
    >>> low = RunningJob("lo", "b", 0, f"{this_host()}:1", at.isoformat(), 2)
    >>> choose_victim(job, [low], 30, at.replace(minute=1)).id
    'lo'
    >>> choose_victim(job, [low], 120, at.replace(minute=1)) is None  # ran only 60 s
    True
    """
    now = now or datetime.now(UTC)
    here = this_host()
    candidates = [
        r
        for r in running
        if r.priority < waiting.priority
        and owner_host(r.owner) == here
        and (now - datetime.fromisoformat(r.acquired_at)).total_seconds() >= min_run_seconds
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (r.priority, r.in_flight))
