"""A shard through a worker: read -> batch -> predict -> write part, bad rows aside.

This is the whole data path of a worker, and it knows nothing of processes or Ray: the
local executor and the Ray actor both call `run_shard` with a model loaded once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from thresher.errors import ModelOutputError
from thresher.models.base import Model, SortsByLength, runs_native
from thresher.sinks.parts import ErrorPart
from thresher.sources.base import Chunk, Shard
from thresher.spec import BatchSection
from thresher.worker.autobatch import BatchTuner
from thresher.worker.pipeline import Prefetch, WriteBehind
from thresher.worker.predict import predict_isolating
from thresher.worker.prepare import prepared
from thresher.worker.profiling import ChunkProfiler
from thresher.worker.rows import Rows
from thresher.worker.tasks import ShardResult, ShardTask, WorkerSetup

READ_WINDOW = 8192  # rows a text model sorts by length at once (see read_rows)


@dataclass
class ShardWork:
    """One shard in a worker: what it is predicted with and where its bad rows go."""

    setup: WorkerSetup
    model: Model
    shard: Shard
    errors: ErrorPart
    tuner: BatchTuner | None = None

    def predict(self, chunk: Chunk, work: float | None = None) -> tuple[pa.Table, np.ndarray]:
        """A chunk's output rows (id, keep columns, predictions) and their positions;
        its bad rows go to the error part. `work`: its cost in the model's units, for the
        tuner (see BatchTuner.observe), which hears the whole batch's time: its own costs
        around the model call are paid per batch too."""
        clock = time.perf_counter()
        setup = self.setup
        rows = _drop_missing(Rows(setup, self.shard, chunk.table, chunk.positions), self.errors)
        table, positions = rows.table, rows.positions
        features = table.select(list(setup.context.features))
        predicted = predict_isolating(self.model, features, setup.model.uri, self.tuner)
        for index, (error, message) in sorted(predicted.failed.items()):
            self.errors.add(rows.bad(index, "predict", error, message))
        if len(predicted.rows) < table.num_rows:
            table = table.take(pa.array(predicted.rows))
            positions = positions[predicted.rows]
        kept = [c for c in (setup.id_column, *setup.keep_columns) if c]
        clash = set(kept) & set(predicted.columns)
        if clash:
            raise ModelOutputError(
                f"model {setup.model.uri}: output column(s) {sorted(clash)} clash with the id"
                " or keep columns; rename them in the model or drop them from keep_columns"
            )
        columns = {name: table.column(name) for name in kept} | predicted.columns
        output = pa.table(columns) if columns else table.select([])
        if self.tuner is not None and predicted.whole:
            self.tuner.observe(features.num_rows, time.perf_counter() - clock, work)
        return output, positions

    def predict_in_batches(self, chunk: Chunk) -> pa.Table:
        """The chunk's output rows, in input order (see `predict_rows`)."""
        return self.predict_rows(chunk)[0]

    def predict_rows(self, chunk: Chunk) -> tuple[pa.Table, np.ndarray]:
        """The chunk's output rows and their positions, in input order, predicted in
        batches of the tuner's size. A text model that can measure its rows (`sort_key`:
        token lengths) gets them shortest first, so each batch pads little; rows go back
        in input order after."""
        lengths: np.ndarray | None = None  # set when the rows were sorted
        model = self.model
        if isinstance(model, SortsByLength) and chunk.table.num_rows > 1:
            features = chunk.table.select(list(self.setup.context.features))
            keys = np.asarray(model.sort_key(features))
            order = np.argsort(keys, kind="stable")
            chunk = Chunk(chunk.table.take(pa.array(order)), chunk.positions[order])
            lengths = keys[order]
        outputs = [self.predict(piece, work) for piece, work in self._pieces(chunk, lengths)]
        if not outputs:
            return pa.table({}), np.empty(0, dtype=np.int64)
        table = pa.concat_tables([t for t, _ in outputs]) if len(outputs) > 1 else outputs[0][0]
        positions = np.concatenate([p for _, p in outputs])
        if lengths is not None:  # back to input order
            order = np.argsort(positions, kind="stable")
            table, positions = table.take(pa.array(order)), positions[order]
        return table, positions

    def _pieces(
        self, chunk: Chunk, lengths: np.ndarray | None
    ) -> Iterator[tuple[Chunk, float | None]]:
        """Batches of the tuner's size, each with its work when rows have lengths (sorted
        shortest first): its rows times its longest row, as the model pads them."""
        rows, tuner = chunk.table.num_rows, self.tuner
        if tuner is not None:
            tuner.begin_chunk(lengths)
        # Table.nbytes walks every buffer of every column (a millisecond for 30 sliced
        # columns, 3% of a tree model's time): only a memory cap needs it.
        capped = rows and tuner is not None and tuner.max_memory
        row_bytes = chunk.table.nbytes / rows if capped else 0.0
        start = 0
        while start < rows:
            size = tuner.batch_size(row_bytes, rows - start) if tuner else rows
            stop = start + size
            last = min(stop, rows) - 1
            work = None if lengths is None else float((last + 1 - start) * lengths[last])
            yield Chunk(chunk.table.slice(start, size), chunk.positions[start:stop]), work
            start = stop


def run_shard(
    setup: WorkerSetup,
    model: Model,
    task: ShardTask,
    report: Callable[[int], None],
    tuner: BatchTuner | None = None,
) -> ShardResult:
    """Run one shard attempt to its staged output; `report(rows)` after every chunk.

    Reading runs a chunk ahead and writing a result behind, on their own threads, while
    the model works through the chunk in batches of the tuner's current size."""
    started = time.perf_counter()
    shard, tuner = task.shard, tuner or tuner_for(setup.batch, model)
    part = setup.parts.open(shard.index, task.attempt)
    errors = ErrorPart(
        setup.parts.error_staging(shard.index, task.attempt), setup.on_bad_input == "fail"
    )
    work = ShardWork(setup, model, shard, errors, tuner)
    profiler = ChunkProfiler.of(setup, shard.index)
    rows_in = rows_out = 0
    window = read_rows(setup.batch, sorts_by_length(model))
    with (
        Prefetch(prepared(setup.reader.read(shard, window), model, setup, shard)) as chunks,
        WriteBehind(part.write) as writer,
    ):
        for chunk in chunks:
            rows_in += chunk.table.num_rows + len(chunk.bad)
            errors.add_all(chunk.bad)
            output, positions = work.predict_rows(chunk)
            writer.put(output)
            if profiler:
                # Not on a thread of its own, as it was: the chunk lived on until that
                # thread let it go while the reader took fresh pages, 2-3% more of a
                # job's CPU. (Arrow's counts and the sampled rows: see monitor.profiler.)
                profiler.add(chunk, output, positions)
            rows_out += output.num_rows
            report(chunk.table.num_rows + len(chunk.bad))
    return ShardResult(
        shard=shard.index,
        attempt=task.attempt,
        part=part.close(),
        errors=errors.close(shard.index, task.attempt),
        rows_in=rows_in,
        rows_out=rows_out,
        rows_error=errors.count,
        seconds=time.perf_counter() - started,
        batch_size=tuner.batch_rows,
        native=runs_native(model),
        profile=profiler.result() if profiler else None,
    )


def tuner_for(batch: BatchSection, model: Model) -> BatchTuner:
    """A worker's tuner: it lives as long as the worker, so later shards start settled.
    It never grows past the rows read at once (see `read_rows`)."""
    fixed = batch.size if isinstance(batch.size, int) else None
    ceiling = min(batch.max_size, read_rows(batch, sorts_by_length(model)))
    # Under "auto", a text model's batches are a budget of padded tokens (see autobatch).
    tokens = sorts_by_length(model) and not getattr(model, "batches_itself", False)
    return BatchTuner(fixed=fixed, max_size=ceiling, max_memory=batch.max_memory, tokens=tokens)


def read_rows(batch: BatchSection, by_length: bool = False) -> int:
    """Rows per chunk read from a shard: a whole number of fixed batches at least
    `READ_WINDOW` rows long (a window wide enough for a text model to sort its rows by
    length, so that small batches pad little), or, under "auto", the tuner's ceiling.

    A text model (`by_length`) under "auto" reads `READ_WINDOW` rows, which caps its
    batches there: a wider window pads no less, and measured slower
    (benchmarks/results/read-window.md)."""
    if isinstance(batch.size, int):
        return batch.size * max(1, -(-READ_WINDOW // batch.size))
    return min(batch.max_size, READ_WINDOW) if by_length else batch.max_size


def sorts_by_length(model: Model) -> bool:
    """Whether the model measures its rows (text models), so chunks are sorted by it."""
    return isinstance(model, SortsByLength)


def _drop_missing(rows: Rows, errors: ErrorPart) -> Rows:
    """Rows with a missing (null) model input become decode errors naming the column."""
    table = rows.table
    missing: np.ndarray | None = None
    for name in rows.setup.context.features:
        column = table.column(name)
        if column.null_count:
            nulls = pc.is_null(column).to_numpy(zero_copy_only=False)
            missing = nulls if missing is None else missing | nulls
    if missing is None:
        return rows
    for index in np.flatnonzero(missing).tolist():
        empty = [n for n in rows.setup.context.features if not table.column(n)[index].is_valid]
        errors.add(rows.bad(index, "decode", "MissingValue", f"column {empty[0]!r}: missing value"))
    return replace(rows, table=table.filter(pa.array(~missing)), positions=rows.positions[~missing])
