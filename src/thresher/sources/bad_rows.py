"""A row that cannot go on, as the bad record that names it: its file and line (or row),
its id and its values — made wherever a row is refused (a worker's stage, or a source
that fetches what a row points at)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from thresher.media.columns import media_kind
from thresher.records import BadRecord, Stage
from thresher.sources.base import ManyRowsPerLine, Shard, ShardReader


def bad_row(
    reader: ShardReader,
    shard: Shard,
    rows: tuple[pa.Table, np.ndarray],
    *,
    index: int,
    id_column: str | None,
    why: tuple[Stage, str, str],
) -> BadRecord:
    """The bad record of row `index` of a chunk (its table and positions) that `reader`
    read from `shard`, its id in `id_column` (if any), refused for `why` (stage, error
    type, message)."""
    (table, positions), (stage, error, message) = rows, why
    position = int(positions[index])
    kind, number = reader.locate(shard, position)
    return BadRecord(
        source=source_of(reader, shard, position),
        stage=stage,
        error=error,
        message=message,
        raw=row_as_text(table, index),
        line=number if kind == "line" else None,
        row=number if kind == "row" else None,
        id=table.column(id_column)[index].as_py() if id_column else None,
        index=reader.input_index(position) if isinstance(reader, ManyRowsPerLine) else None,
    )


def source_of(reader: ShardReader, shard: Shard, position: int) -> str:
    """What a bad record names as its source: the row's own file, for a reader whose
    shard spans files (`source_of`: images), else the shard's file."""
    named = getattr(reader, "source_of", None)
    return str(named(shard, position)) if callable(named) else shard.path


def row_as_text(table: pa.Table, index: int) -> str:
    """A row as JSON, for the `raw` field of an error record. Bytes (an image file) and
    pixels show as their size: their text is no help to a person, and cut to 1 KiB."""
    row = table.slice(index, 1)
    values = {}
    for column_field, column in zip(row.schema, row.columns, strict=True):
        if pa.types.is_binary(column_field.type) or pa.types.is_large_binary(column_field.type):
            value = column[0].as_py()
            values[column_field.name] = None if value is None else f"<{len(value)} bytes>"
        elif media_kind(column_field) is not None:
            values[column_field.name] = "<image>"
        else:
            values[column_field.name] = column[0].as_py()
    return json.dumps(values, default=str, allow_nan=True)
