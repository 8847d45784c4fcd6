"""Executors run shard tasks somewhere (`local` worker processes, a `ray` actor pool) and
report what happens; what travels between the coordinator and the workers they run is
the worker's (`thresher.worker.tasks`)."""

from __future__ import annotations

from thresher.executors.base import Executor, make_executor

__all__ = ["Executor", "make_executor"]
