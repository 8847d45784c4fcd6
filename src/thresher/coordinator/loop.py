"""The coordinator's loop: hand shards to an executor, commit what comes back, record it.

What a task is and what its end records is the `Ledger`'s: a run's (`JobLedger`, which
commits through `commit.commit_shard`) or a retry round's (`coordinator/retry.py`). The
loop is the same for both, so both run on any executor, with its timeouts and retries.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from thresher.coordinator.commit import commit_shard
from thresher.coordinator.profile_fold import ProfileFold
from thresher.coordinator.progress import Reporter
from thresher.errors import JobFailed
from thresher.executors.base import Executor
from thresher.sinks import Sink
from thresher.sources import Shard
from thresher.store import JobState, Store
from thresher.worker.tasks import (
    Event,
    Progress,
    ShardDone,
    ShardFailed,
    ShardResult,
    ShardTask,
    Task,
    WorkerBroken,
    WorkerSetup,
)

HEARTBEAT_SECONDS = 1.0


@dataclass
class LoopOutcome:
    """What one run of the loop saw: shards that failed for good, and whether it was
    cancelled or preempted. Counts live in the store, which also knows earlier runs'
    shards."""

    failures: list[str] = field(default_factory=list)
    cancelled: bool = False
    preempted: bool = False
    rows_seen: int = 0
    batch_sizes: Counter[int] = field(default_factory=Counter)  # rows done at each size
    native: set[bool] = field(default_factory=set)  # the model's paths its shards ran

    @property
    def ran_native(self) -> bool | None:
        """False if any shard ran the model's slower path, True if all ran its native
        one, None if the model has no such choice."""
        return min(self.native) if self.native else None


class Ledger(Protocol):
    """What a kind of shard task means to the job: the task for an attempt, and what is
    recorded when one starts, fails, or is done (which is where it is committed)."""

    def task(self, shard: Shard, number: int) -> Task: ...

    def started(self, task: Task) -> None: ...

    def failed(self, task: Task, message: str, final: bool) -> None: ...

    def done(self, result: ShardResult) -> None: ...


@dataclass(frozen=True)
class JobLedger:
    """A run's shards: attempts recorded in the store, each finished shard committed by
    `commit_shard`, then its profile folded into the job's (`profiles`, when it profiles)."""

    job_id: str
    store: Store
    sink: Sink
    profiles: ProfileFold | None = None

    def task(self, shard: Shard, number: int) -> Task:
        return ShardTask(shard=shard, attempt=f"a{number}-{secrets.token_hex(4)}", number=number)

    def started(self, task: Task) -> None:
        self.store.attempt_started(self.job_id, task.shard.index, task.attempt, task.number)

    def failed(self, task: Task, message: str, final: bool) -> None:
        self.store.attempt_failed(self.job_id, task.shard.index, task.attempt, message, final)

    def done(self, result: ShardResult) -> None:
        commit_shard(self.sink, self.store, self.job_id, result)
        if self.profiles is not None:
            self.profiles.add(result.shard, result.profile)


@dataclass
class ShardLoop:
    """Feeds one job's shard tasks to an executor and turns its events into commits."""

    job_id: str
    store: Store
    ledger: Ledger
    executor: Executor
    reporter: Reporter
    max_attempts: int
    outcome: LoopOutcome = field(default_factory=LoopOutcome)

    def run(self, shards: list[Shard], setup: WorkerSetup) -> LoopOutcome:
        self.executor.start(setup)
        for shard in shards:
            self._submit(shard, number=1)
        beat = time.monotonic()
        while self.executor.pending():
            for event in self.executor.events(timeout=HEARTBEAT_SECONDS):
                self._handle(event)
            if time.monotonic() - beat >= HEARTBEAT_SECONDS:
                beat = time.monotonic()
                # Stopping here is at a shard boundary: committed shards stay committed,
                # in-flight ones are abandoned with the executor and their staging
                # discarded by the sink's abort, so a resume redoes each exactly once.
                state = self.store.heartbeat(self.job_id)
                if state in (JobState.CANCELLED, JobState.PREEMPTED):
                    self.outcome.cancelled = state == JobState.CANCELLED
                    self.outcome.preempted = state == JobState.PREEMPTED
                    break
        return self.outcome

    def _submit(self, shard: Shard, number: int) -> None:
        task = self.ledger.task(shard, number)
        self.ledger.started(task)
        self.executor.submit(task)

    def _handle(self, event: Event) -> None:
        if isinstance(event, Progress):
            self.outcome.rows_seen += event.rows
            self.reporter.advance(event.rows)
        elif isinstance(event, ShardDone):
            self.ledger.done(event.result)
            self.outcome.batch_sizes[event.result.batch_size] += event.result.rows_in
            if event.result.native is not None:
                self.outcome.native.add(event.result.native)
            self.reporter.shard_done()
        elif isinstance(event, ShardFailed):
            self._failed(event)
        elif isinstance(event, WorkerBroken):
            raise JobFailed(
                f"a worker could not start: {event.error}: {event.message}", stage="load"
            )

    def _failed(self, event: ShardFailed) -> None:
        task = event.task
        message = f"{event.error}: {event.message}"
        final = not event.retry or task.number >= self.max_attempts
        self.ledger.failed(task, message, final)
        if not final:
            self.reporter.note(f"shard {task.shard.index}: {message}; retrying")
            self._submit(task.shard, task.number + 1)
            return
        self.outcome.failures.append(
            f"shard {task.shard.index} ({task.shard.path}) failed after {task.number} "
            f"attempt(s): {message}"
        )
