"""A retry task in a worker: a shard's rejected rows, read and predicted again.

The shard is re-read through the job's own reader (same plan, same parsing) and only the
rows the task names are predicted, in batches as a job's worker makes them; the rows that
now pass are staged as a part (under the retry round's names), and the shard's new error
part holds its kept records and the rows that still fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from thresher.models.base import Model, PreparesRows, runs_native
from thresher.sinks.parts import ErrorPart
from thresher.sources.base import Chunk, ManyRowsPerLine, Shard
from thresher.worker.autobatch import BatchTuner
from thresher.worker.prepare import prepare_chunk
from thresher.worker.shard import ShardWork, read_rows, sorts_by_length, tuner_for
from thresher.worker.tasks import RetryTask, ShardResult, WorkerSetup


def run_retry(
    setup: WorkerSetup,
    model: Model,
    task: RetryTask,
    report: Callable[[int], None],
    tuner: BatchTuner | None = None,
) -> ShardResult:
    """Run one retry attempt to its staged part and error part."""
    started = time.perf_counter()
    shard, tuner = task.shard, tuner or tuner_for(setup.batch, model)
    errors = ErrorPart(setup.parts.error_staging(shard.index, task.attempt), fail_fast=False)
    for line in task.kept:
        errors.add_line(line)
    writer = setup.parts.open(shard.index, task.attempt)
    work = ShardWork(setup, model, shard, errors, tuner)
    fixed = 0
    for chunk in setup.reader.read(shard, read_rows(setup.batch, sorts_by_length(model))):
        picked = pick_rows(chunk, task.rows, setup, shard)
        if isinstance(model, PreparesRows):  # images decoded: those that fail, fail again
            picked = prepare_chunk(picked, model, setup, shard)
            errors.add_all(picked.bad)
        if picked.table.num_rows:
            output = work.predict_in_batches(picked)
            writer.write(output)
            fixed += output.num_rows
        report(picked.table.num_rows + len(picked.bad))
    return ShardResult(
        shard=shard.index,
        attempt=task.attempt,
        part=writer.close(),
        errors=errors.close(shard.index, task.attempt),
        rows_in=len(task.rows),
        rows_out=fixed,
        rows_error=len(task.rows) - fixed,
        seconds=time.perf_counter() - started,
        batch_size=tuner.batch_rows,
        native=runs_native(model),
    )


def pick_rows(
    chunk: Chunk, wanted: frozenset[tuple[int, int]], setup: WorkerSetup, shard: Shard
) -> Chunk:
    """The chunk's rows whose (line or row number, place in the line) is in `wanted`. A
    reader's positions map to those numbers by a constant offset per shard, but for one
    with several rows to a line, which names both itself."""
    reader = setup.reader
    if isinstance(reader, ManyRowsPerLine):
        places = [
            (reader.locate(shard, p)[1], reader.input_index(p)) for p in chunk.positions.tolist()
        ]
        mask = np.fromiter((place in wanted for place in places), dtype=bool, count=len(places))
    else:
        _, base = reader.locate(shard, 0)
        numbers = np.fromiter((number for number, _ in wanted), dtype=np.int64, count=len(wanted))
        mask = np.isin(chunk.positions + base, numbers)
    return Chunk(table=chunk.table.filter(pa.array(mask)), positions=chunk.positions[mask])
