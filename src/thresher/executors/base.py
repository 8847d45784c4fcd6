"""The executor contract, and the one function that picks an executor for a run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from thresher.plan.placement import Placement
from thresher.plugins import Kind, find
from thresher.spec import RunSection
from thresher.worker.tasks import Event, Task, WorkerSetup


class Executor(Protocol):
    """Runs shard tasks somewhere and reports what happens, never touching job state."""

    def start(self, setup: WorkerSetup) -> None: ...

    def submit(self, task: Task) -> None: ...

    def pending(self) -> int:
        """Submitted tasks not yet reported done or failed."""
        ...

    def events(self, timeout: float = 1.0) -> Iterator[Event]: ...

    def shutdown(self) -> None: ...


def make_executor(run: RunSection, placement: Placement) -> Executor:
    """The executor a `[run]` section asks for: the registered executor plug-in that
    `run.executor` names (plugins.py)."""
    executor: Executor = find(Kind.EXECUTOR, run.executor).load()(run, placement)
    return executor
