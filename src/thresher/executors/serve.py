"""A worker's side of every local executor: load the model once, then run the tasks it is
handed and say what happened, until handed `None`. A worker process (`local`) and a
worker thread (`inline`) run this same loop; only how tasks and events travel differs
(a pipe, or two queues)."""

from __future__ import annotations

import traceback
from collections.abc import Callable

from thresher.executors.tasks import (
    NOT_RETRYABLE,
    Event,
    Progress,
    ShardDone,
    ShardFailed,
    Task,
    WorkerBroken,
    WorkerSetup,
)
from thresher.faults import crash_point

__all__ = ["READY", "serve_tasks"]

READY = "ready"  # a worker's first message: its model is loaded, shard clocks may run


def serve_tasks(
    setup: WorkerSetup,
    threads: int,
    receive: Callable[[], Task | None],
    send: Callable[[Event | str], None],
) -> None:
    """Load the model, send READY (or WorkerBroken), then run each task `receive` gives
    and `send` its Progress and its ShardDone or ShardFailed, until `receive` gives None."""
    import pyarrow as pa

    from thresher.models import load_model
    from thresher.worker.run import run_task
    from thresher.worker.shard import tuner_for

    pa.set_cpu_count(max(1, threads))
    try:
        model = load_model(setup.model, setup.context)
    except Exception as exc:
        send(WorkerBroken(type(exc).__name__, str(exc)))
        return
    send(READY)
    tuner = tuner_for(setup.batch, model)  # kept across shards: later shards start settled
    while (task := receive()) is not None:

        def report(rows: int, shard: int = task.shard.index) -> None:
            send(Progress(shard, rows))

        try:
            result = run_task(setup, model, task, report, tuner)
            crash_point("worker_after_stage", task.shard.index)
            send(ShardDone(result))
        except Exception as exc:
            message = str(exc) or traceback.format_exc(limit=3)
            send(ShardFailed(task, type(exc).__name__, message, not isinstance(exc, NOT_RETRYABLE)))
