"""The one entry to a worker's data path: any kind of shard task to its staged result."""

from __future__ import annotations

from collections.abc import Callable

from thresher.models.base import Model
from thresher.worker.autobatch import BatchTuner
from thresher.worker.retry import run_retry
from thresher.worker.shard import run_shard
from thresher.worker.tasks import RetryTask, ShardResult, Task, WorkerSetup
from thresher.worker.tracing import flush as flush_spans
from thresher.worker.tracing import span


def run_task(
    setup: WorkerSetup,
    model: Model,
    task: Task,
    report: Callable[[int], None],
    tuner: BatchTuner | None = None,
) -> ShardResult:
    """Run any kind of shard task: a first run or retry of a shard, or a retry round's
    rejected rows. Every executor calls this, so every kind runs everywhere."""
    kind = "retry" if isinstance(task, RetryTask) else "shard"
    shard = task.shard
    with span(f"thresher.{kind}", setup.trace, shard=shard.index) as traced:
        # where it reads: a file's byte range (text) or row groups (Parquet)
        traced.set(attempt=getattr(task, "number", None), path=shard.path)
        traced.set(start=shard.start, stop=shard.stop)
        if isinstance(task, RetryTask):
            result = run_retry(setup, model, task, report, tuner)
        else:
            result = run_shard(setup, model, task, report, tuner)
        traced.set(rows_in=result.rows_in, rows_out=result.rows_out, rows_error=result.rows_error)
    flush_spans()  # a worker may be gone before a batch of spans would have left
    return result
