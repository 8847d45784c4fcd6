"""Executors run shard tasks somewhere (`local` worker processes, a `ray` actor pool) and
report what happens; what travels between them and the coordinator is in `tasks.py`."""

from __future__ import annotations

from thresher.executors.base import Executor, make_executor

__all__ = ["Executor", "make_executor"]
