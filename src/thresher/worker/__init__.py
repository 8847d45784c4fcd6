"""The worker's data path: read a shard, batch it, predict, isolate bad rows, stage the
part. It runs in worker processes or Ray actors and never touches the store; what it is
given and gives back (setup, tasks, results, events) is `tasks.py`."""

from __future__ import annotations

from thresher.worker.run import run_task
from thresher.worker.shard import run_shard

__all__ = ["run_shard", "run_task"]
