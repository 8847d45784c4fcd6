"""The one entry to a worker's data path: any kind of shard task to its staged result."""

from __future__ import annotations

from collections.abc import Callable

from thresher.models.base import Model
from thresher.worker.autobatch import BatchTuner
from thresher.worker.retry import run_retry
from thresher.worker.shard import run_shard
from thresher.worker.tasks import RetryTask, ShardResult, Task, WorkerSetup


def run_task(
    setup: WorkerSetup,
    model: Model,
    task: Task,
    report: Callable[[int], None],
    tuner: BatchTuner | None = None,
) -> ShardResult:
    """Run any kind of shard task: a first run or retry of a shard, or a retry round's
    rejected rows. Every executor calls this, so every kind runs everywhere."""
    if isinstance(task, RetryTask):
        return run_retry(setup, model, task, report, tuner)
    return run_shard(setup, model, task, report, tuner)
