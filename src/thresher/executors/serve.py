"""A worker's side of every local executor: load the model once, then run the tasks it is
handed and say what happened, until handed `None`. A worker process (`local`) and a
worker thread (`inline`) run this same loop; only how tasks and events travel differs
(a pipe, or two queues)."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from thresher.faults import crash_point
from thresher.worker.tasks import (
    NOT_RETRYABLE,
    Event,
    Progress,
    ShardDone,
    ShardFailed,
    Task,
    WorkerBroken,
    WorkerSetup,
)

if TYPE_CHECKING:
    from thresher.models import Model

__all__ = ["READY", "load_for_worker", "serve_tasks"]

READY = "ready"  # a worker's first message: its model is loaded, shard clocks may run
PROGRESS_SECONDS = 0.25  # a worker's progress reaches the coordinator at most this often


def load_for_worker(setup: WorkerSetup, threads: int) -> Model | WorkerBroken:
    """The job's model as a worker loads it with `threads` threads, or why it cannot."""
    from dataclasses import replace

    from thresher.models import load_model

    try:
        return load_model(setup.model, replace(setup.context, threads=threads))
    except Exception as exc:
        return WorkerBroken(type(exc).__name__, str(exc))


def serve_tasks(
    setup: WorkerSetup,
    threads: int,
    receive: Callable[[], Task | None],
    send: Callable[[Event | str], None],
    loaded: Model | WorkerBroken | None = None,
) -> None:
    """Load the model (unless `loaded` is it, or why it could not be), send READY (or
    WorkerBroken), then run each task `receive` gives and `send` its Progress and its
    ShardDone or ShardFailed, until `receive` gives None."""
    import pyarrow as pa

    from thresher.worker.run import run_task
    from thresher.worker.shard import tuner_for

    pa.set_cpu_count(max(1, threads))
    model = load_for_worker(setup, threads) if loaded is None else loaded
    if isinstance(model, WorkerBroken):
        send(model)
        return
    send(READY)
    tuner = tuner_for(setup.batch, model)  # kept across shards: later shards start settled
    while (task := receive()) is not None:
        report = ThrottledProgress(send, task.shard.index)
        try:
            result = run_task(setup, model, task, report, tuner)
            crash_point("worker_after_stage", task.shard.index)
            report.flush()
            send(ShardDone(result))
        except Exception as exc:
            report.flush()
            message = str(exc) or traceback.format_exc(limit=3)
            send(ShardFailed(task, type(exc).__name__, message, not isinstance(exc, NOT_RETRYABLE)))


@dataclass
class ThrottledProgress:
    """A shard's progress (`report(rows)` after each chunk), sent on at most every
    `PROGRESS_SECONDS`: each send wakes the coordinator, which on a busy machine takes
    the worker's core from it for a while (benchmarks/results/profile-overhead.md)."""

    send: Callable[[Event | str], None]
    shard: int
    rows: int = 0
    sent_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.sent_at = time.monotonic()  # the shard's start

    def __call__(self, rows: int) -> None:
        self.rows += rows
        if time.monotonic() - self.sent_at >= PROGRESS_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Send the rows not yet reported, if any."""
        if self.rows:
            self.send(Progress(self.shard, self.rows))
        self.rows, self.sent_at = 0, time.monotonic()
