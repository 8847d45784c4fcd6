"""The executor contract, and the one function that picks an executor for a run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from thresher.executors.tasks import Event, ShardTask, WorkerSetup
from thresher.plan.placement import Placement
from thresher.spec import RunSection


class Executor(Protocol):
    """Runs shard tasks somewhere and reports what happens, never touching job state."""

    def start(self, setup: WorkerSetup) -> None: ...

    def submit(self, task: ShardTask) -> None: ...

    def pending(self) -> int:
        """Submitted tasks not yet reported done or failed."""
        ...

    def events(self, timeout: float = 1.0) -> Iterator[Event]: ...

    def shutdown(self) -> None: ...


def make_executor(run: RunSection, placement: Placement) -> Executor:
    """The executor a `[run]` section asks for."""
    if run.executor == "ray":
        from thresher.executors.ray_pool import RayExecutor

        return RayExecutor(run=run, workers=placement.workers)
    from thresher.executors.local import LocalExecutor

    return LocalExecutor(
        workers=placement.workers,
        threads=placement.threads,
        shard_timeout=run.shard_timeout,
        devices=placement.devices,
    )
