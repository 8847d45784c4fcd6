"""A worker's side of `[monitor] profile`: each chunk's model inputs (the rows read) and
prediction columns (the rows predicted) into the shard's profile, sent with its result."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from thresher.arrays import from_numpy
from thresher.profiles.profiler import ShardProfiler
from thresher.sources.base import Chunk
from thresher.worker.tasks import WorkerSetup

__all__ = ["ChunkProfiler"]


class ChunkProfiler:
    def __init__(self, setup: WorkerSetup, shard: int) -> None:
        assert setup.profile is not None
        self._features = list(setup.context.features)
        self._kept = {c for c in (setup.id_column, *setup.keep_columns) if c}
        self._segment_by = setup.profile.segment_by
        self._profiler = ShardProfiler(setup.profile.sample_rate, shard, self._segment_by)
        self._cpu = 0.0

    @classmethod
    def of(cls, setup: WorkerSetup, shard: int) -> ChunkProfiler | None:
        """The shard's profiler, or None when the job does not profile."""
        return cls(setup, shard) if setup.profile is not None else None

    def add(self, chunk: Chunk, output: pa.Table, positions: np.ndarray) -> None:
        """One chunk and its `output`, the predicted rows, at `positions` (the chunk's
        own, which rise through the chunk, so each output row's input row is found by
        bisection)."""
        started = time.thread_time()  # this thread's CPU in here: what profiling costs
        predictions = output.drop_columns([c for c in output.column_names if c in self._kept])
        segments = None
        if self._segment_by:
            column = chunk.table.column(self._segment_by)
            rows = np.searchsorted(chunk.positions, positions)
            segments = (column, column.take(from_numpy(rows)))
        inputs = chunk.table.select(self._features)
        self._profiler.update(inputs, predictions, segments)
        self._cpu += time.thread_time() - started

    def result(self) -> str:
        started = time.thread_time()  # the sketching counts: the sample goes to sketches
        profile = self._profiler.profile()
        profile.cpu_seconds = self._cpu + time.thread_time() - started
        return profile.to_text()
