"""A chunk's rows with what it takes to report any of them as a bad record."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from thresher.records import BadRecord, Stage
from thresher.sources.base import ManyRowsPerLine, Shard, ShardReader
from thresher.worker.predict import row_as_text
from thresher.worker.tasks import WorkerSetup


@dataclass(frozen=True)
class Rows:
    """A chunk's rows with what it takes to report any of them as a bad record."""

    setup: WorkerSetup
    shard: Shard
    table: pa.Table
    positions: np.ndarray

    def bad(self, index: int, stage: Stage, error: str, message: str) -> BadRecord:
        reader, position = self.setup.reader, int(self.positions[index])
        kind, number = reader.locate(self.shard, position)
        id_column = self.setup.id_column
        return BadRecord(
            source=source_of(reader, self.shard, position),
            stage=stage,
            error=error,
            message=message,
            raw=row_as_text(self.table, index),
            line=number if kind == "line" else None,
            row=number if kind == "row" else None,
            id=self.table.column(id_column)[index].as_py() if id_column else None,
            index=reader.input_index(position) if isinstance(reader, ManyRowsPerLine) else None,
        )


def source_of(reader: ShardReader, shard: Shard, position: int) -> str:
    """What a bad record names as its source: the row's own file, for a reader whose
    shard spans files (`source_of`: images), else the shard's file."""
    named = getattr(reader, "source_of", None)
    return str(named(shard, position)) if callable(named) else shard.path
