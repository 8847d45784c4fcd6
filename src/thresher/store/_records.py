"""What the store hands out about jobs: their states and records (plain frozen data)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from thresher.spec import JobSpec


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Stopped at a shard boundary for a job of higher priority; waits in the queue and
    # resumes from its stored plan. Not finished: no webhook, no results yet.
    PREEMPTED = "preempted"
    # Every shard committed, but a `[publish] checks` check failed: the output waits,
    # staged, and the previous output stays live until `approve` or `reject` decides.
    # Not finished: no webhook yet, no results to download.
    HELD = "held"
    # `approve` decided to publish a held job and is publishing it (a crash here is
    # finished by running `approve` again); `succeeded` once published.
    APPROVED = "approved"
    # `reject` discarded a held job's staged output; the previous output stays.
    REJECTED = "rejected"

    @property
    def finished(self) -> bool:
        ended = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED)
        return self in ended

    @property
    def awaiting_decision(self) -> bool:
        """Held by the publish gate, or approved and not yet published: its coordinator's
        run is over, and only `approve` or `reject` moves it on."""
        return self in (JobState.HELD, JobState.APPROVED)

    @property
    def waiting(self) -> bool:
        """Queued to start, or preempted and queued to resume."""
        return self in (JobState.QUEUED, JobState.PREEMPTED)


class ShardState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class AttemptOutcome(StrEnum):
    DONE = "done"  # committed
    FAILED = "failed"


@dataclass(frozen=True)
class JobRecord:
    id: str
    name: str
    state: JobState
    spec: JobSpec
    plan: dict[str, Any]
    shard_count: int
    created_at: str
    finished_at: str | None
    message: str | None
    owner: str | None
    manifest: dict[str, Any] | None
    tenant: str | None = None
    priority: int = 0
    wait_reason: str | None = None  # why a queued or preempted job has not started yet


@dataclass(frozen=True)
class ShardRecord:
    index: int
    state: ShardState
    attempts: int
    rows_in: int
    rows_out: int
    rows_error: int
    seconds: float
    error: str | None


@dataclass(frozen=True)
class Totals:
    shards_done: int
    shards_failed: int
    rows_in: int
    rows_out: int
    rows_error: int
