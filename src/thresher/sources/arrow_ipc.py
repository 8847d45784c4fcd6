"""Arrow IPC files (`.arrow`, `.feather`): shards are runs of whole record batches,
planned from the file's footer alone, read memory-mapped.

A memory-mapped IPC file is Arrow's own layout on disk: reading a batch copies nothing,
and every worker reading the same file shares the operating system's one copy of its
pages. That is how an in-memory table reaches workers (`thresher.predict`,
`inmemory/data.py`): written once, in the calling process, to a file no worker copies.

A row whose value could not be made the column's type on the way in (a string in a
numeric column of a pandas frame) is carried as the row's message in `BAD_ROW_COLUMN`,
its other values null; the reader hands such rows on as bad records, so they reach the
job's errors as a bad line of a CSV file does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from thresher.errors import SourceError
from thresher.records import BadRecord
from thresher.sources.base import MAX_COLUMNS, Chunk, Plan, Shard, check_width, file_source_fields
from thresher.sources.files import filesystem, is_local, list_files
from thresher.spec import SourceSection

SUFFIXES = (".arrow", ".feather", ".ipc")
BAD_ROW_COLUMN = "__thresher_bad_row__"


@dataclass(frozen=True)
class ArrowSource:
    uri: str
    shard_bytes: int
    min_shards: int = 1
    roots: tuple[str, ...] = ()
    max_columns: int = MAX_COLUMNS
    files: tuple[str, ...] = ()

    def plan(self) -> Plan:
        shards: list[Shard] = []
        schema: pa.Schema | None = None
        for url in list_files(self.uri, SUFFIXES, self.roots, self.files):
            with _open(url) as ipc:
                check_width(url, len(ipc.schema), self.max_columns)
                schema = schema or ipc.schema
                sizes = [_batch_size(ipc, i) for i in range(ipc.num_record_batches)]
            shards.extend(_split(url, sizes, self._bytes_per_shard(sizes), len(shards)))
        assert schema is not None  # list_files never returns an empty list
        if BAD_ROW_COLUMN in schema.names:
            schema = schema.remove(schema.get_field_index(BAD_ROW_COLUMN))
        return Plan(shards=shards, schema=schema)

    def _bytes_per_shard(self, sizes: Sequence[tuple[int, int]]) -> int:
        """`shard_bytes`, or less where that leaves a worker without a shard."""
        total = sum(size for _, size in sizes)
        return max(1, min(self.shard_bytes, -(-total // max(1, self.min_shards))))

    def reader(self, schema: pa.Schema, columns: list[str]) -> ArrowReader:
        return ArrowReader(columns=tuple(columns))


@dataclass(frozen=True)
class ArrowReader:
    columns: tuple[str, ...]

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        with _open(shard.path) as ipc:
            names = set(ipc.schema.names)
            missing = [c for c in self.columns if c not in names]
            if missing:
                raise SourceError(f"{shard.path}: missing column(s) {', '.join(missing)}")
            marked = BAD_ROW_COLUMN in names
            wanted = [*self.columns, BAD_ROW_COLUMN] if marked else list(self.columns)
            row = shard.first_row
            for index in range(shard.start, shard.stop):
                batch = ipc.get_batch(index).select(wanted)
                for start in range(0, batch.num_rows, rows_per_chunk):
                    piece = pa.Table.from_batches([batch.slice(start, rows_per_chunk)])
                    yield _chunk(shard.path, piece, row + start, marked)
                row += batch.num_rows

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        return "row", position


def _chunk(path: str, table: pa.Table, first_row: int, marked: bool) -> Chunk:
    """A piece of a batch as a chunk, its marked rows split off as bad records."""
    positions = np.arange(first_row, first_row + table.num_rows, dtype=np.int64)
    if not marked:
        return Chunk(table=table, positions=positions)
    messages = table.column(BAD_ROW_COLUMN)
    table = table.drop_columns([BAD_ROW_COLUMN])
    if messages.null_count == len(messages):
        return Chunk(table=table, positions=positions)
    bad_mask = pc.is_valid(messages)
    bad_rows = np.flatnonzero(bad_mask.to_numpy(zero_copy_only=False))
    texts = messages.to_pylist()
    bad = [
        BadRecord(path, "read", "BadInputError", texts[i], row=int(positions[i])) for i in bad_rows
    ]
    keep = pc.invert(bad_mask)
    return Chunk(table=table.filter(keep), positions=positions[~bad_mask.to_numpy()], bad=bad)


def _batch_size(ipc: pa.ipc.RecordBatchFileReader, index: int) -> tuple[int, int]:
    batch = ipc.get_batch(index)  # memory-mapped: reads the batch's header, not its data
    return batch.num_rows, batch.nbytes


def _split(
    url: str, sizes: Sequence[tuple[int, int]], shard_bytes: int, first_index: int
) -> list[Shard]:
    """Consecutive record batches, grouped until each shard holds about `shard_bytes`."""
    shards: list[Shard] = []
    start, size, row, start_row = 0, 0, 0, 0
    for index, (rows, nbytes) in enumerate(sizes):
        size += nbytes
        row += rows
        if size >= shard_bytes or index == len(sizes) - 1:
            shard = Shard(
                first_index + len(shards), url, start, index + 1, start_row, row - start_row
            )
            shards.append(shard)
            start, size, start_row = index + 1, 0, row
    return shards


class _open:  # used like the built-in open()
    """An IPC file reader over a memory-mapped local file or an fsspec file."""

    def __init__(self, url: str) -> None:
        fs, path = filesystem(url)
        try:
            self._file = pa.memory_map(path) if is_local(fs) else fs.open(path, "rb")
            self._reader = pa.ipc.open_file(self._file)
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(f"{url}: not a readable Arrow IPC file: {exc}") from exc

    def __enter__(self) -> pa.ipc.RecordBatchFileReader:
        return self._reader

    def __exit__(self, *_: object) -> None:
        self._file.close()


def arrow_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> ArrowSource:
    """The `arrow` source plug-in: Arrow IPC (Feather v2) files."""
    return ArrowSource(**file_source_fields(section, min_shards))
