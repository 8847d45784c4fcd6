"""The coordinator's loop: hand shards to an executor, commit what comes back, record it.

Each finished shard goes through `commit.commit_shard`, which owns the commit order.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from dataclasses import dataclass, field

from thresher.coordinator.commit import commit_shard
from thresher.errors import JobFailed
from thresher.executors.base import Executor
from thresher.executors.tasks import (
    Event,
    Progress,
    ShardDone,
    ShardFailed,
    ShardResult,
    ShardTask,
    WorkerBroken,
    WorkerSetup,
)
from thresher.progress import Reporter
from thresher.sinks import Sink
from thresher.sources import Shard
from thresher.store import JobState, Store

HEARTBEAT_SECONDS = 1.0


@dataclass
class LoopOutcome:
    """What one run of the loop saw: shards that failed for good, and whether it was
    cancelled. Counts live in the store, which also knows earlier runs' shards."""

    failures: list[str] = field(default_factory=list)
    cancelled: bool = False
    rows_seen: int = 0
    batch_sizes: Counter[int] = field(default_factory=Counter)  # rows done at each size


@dataclass
class ShardLoop:
    """Feeds one job's shards to an executor and turns its events into commits."""

    job_id: str
    store: Store
    sink: Sink
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
                if self.store.heartbeat(self.job_id) == JobState.CANCELLED:
                    self.outcome.cancelled = True
                    break
        return self.outcome

    def _submit(self, shard: Shard, number: int) -> None:
        task = ShardTask(shard=shard, attempt=f"a{number}-{secrets.token_hex(4)}", number=number)
        self.store.attempt_started(self.job_id, shard.index, task.attempt, number)
        self.executor.submit(task)

    def _handle(self, event: Event) -> None:
        if isinstance(event, Progress):
            self.outcome.rows_seen += event.rows
            self.reporter.advance(event.rows)
        elif isinstance(event, ShardDone):
            self._commit(event.result)
            self.reporter.shard_done()
        elif isinstance(event, ShardFailed):
            self._failed(event)
        elif isinstance(event, WorkerBroken):
            raise JobFailed(f"a worker could not start: {event.error}: {event.message}")

    def _failed(self, event: ShardFailed) -> None:
        task = event.task
        message = f"{event.error}: {event.message}"
        final = not event.retry or task.number >= self.max_attempts
        self.store.attempt_failed(self.job_id, task.shard.index, task.attempt, message, final)
        if not final:
            self.reporter.note(f"shard {task.shard.index}: {message}; retrying")
            self._submit(task.shard, task.number + 1)
            return
        self.outcome.failures.append(
            f"shard {task.shard.index} ({task.shard.path}) failed after {task.number} "
            f"attempt(s): {message}"
        )

    def _commit(self, result: ShardResult) -> None:
        commit_shard(self.sink, self.store, self.job_id, result)
        self.outcome.batch_sizes[result.batch_size] += result.rows_in
