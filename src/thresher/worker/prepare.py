"""A model's own preparation of each chunk (`PreparesRows`: images decoded and
preprocessed), run as the chunks are read, so it overlaps with the model as reading does."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from thresher.models.base import Model, PreparesRows
from thresher.sources.base import Chunk, Shard
from thresher.worker.rows import Rows
from thresher.worker.tasks import WorkerSetup


def prepared(
    chunks: Iterator[Chunk], model: Model, setup: WorkerSetup, shard: Shard
) -> Iterator[Chunk]:
    """`chunks` as the model prepares them (as they are, for a model without `prepare`),
    the rows it could not prepare moved to each chunk's bad records."""
    if not isinstance(model, PreparesRows):
        yield from chunks
        return
    for chunk in chunks:
        yield prepare_chunk(chunk, model, setup, shard)


def prepare_chunk(chunk: Chunk, model: PreparesRows, setup: WorkerSetup, shard: Shard) -> Chunk:
    """One chunk through `model.prepare`."""
    if chunk.table.num_rows == 0:
        return chunk
    table, failures = model.prepare(chunk.table)
    if not failures:
        return Chunk(table, chunk.positions, chunk.bad)
    rows = Rows(setup, shard, chunk.table, chunk.positions)
    bad = list(chunk.bad)
    for index, (stage, error, message) in sorted(failures.items()):
        bad.append(rows.bad(index, stage, error, message))
    kept = np.ones(chunk.table.num_rows, dtype=bool)
    kept[list(failures)] = False
    return Chunk(table, chunk.positions[kept], bad)
