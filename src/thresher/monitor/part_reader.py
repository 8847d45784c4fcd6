"""A part of actuals read from a file as a stream of record batches, within limits.

Only the columns asked for (the id and the label) are kept, batch by batch, so memory
follows those two columns, not the file. A part may be capped at a number of rows and of
decompressed bytes: `PartTooLarge` comes as soon as it passes either, before the rest is
read — a 19 KB gzip can hold five million rows. JSON lines are checked before Arrow sees
them (objects only, nesting depth, UTF-8, length), as a job's input is, so a line nested
20,000 levels deep is a bad line naming its number, not a crashed process.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from thresher.errors import MonitorError

__all__ = ["PartLimits", "PartTooLarge", "read_columns"]

BATCH_ROWS = 64 * 1024  # Parquet rows per batch read
CSV_BLOCK = 1 << 20  # Arrow's CSV block: its header line must fit in one


class PartTooLarge(MonitorError):
    """A part over one of its limits (`PartLimits`); the service answers 413."""


@dataclass(frozen=True)
class PartLimits:
    """The most rows, and decompressed bytes, one part may hold (None: no limit, the
    CLI's, whose operator is trusted); `setting` is what sets them, for the message
    (`upload_max_rows`, or `upload_max_bytes`, in the server's config)."""

    rows: int | None = None
    bytes: int | None = None
    rows_setting: str = "the row limit"
    bytes_setting: str = "the size limit"

    def check_rows(self, rows: int, name: str) -> None:
        if self.rows is not None and rows > self.rows:
            raise PartTooLarge(
                f"{name}: more than {self.rows:,} rows, the most one part may hold here"
                f" ({self.rows_setting}); send the labels in smaller parts"
            )

    def check_bytes(self, size: int, name: str) -> None:
        if self.bytes is not None and size > self.bytes:
            raise PartTooLarge(
                f"{name}: more than {self.bytes:,} bytes once decompressed, the most one part"
                f" may hold here ({self.bytes_setting}); send the labels in smaller parts"
            )


class _Counted:
    """A binary stream whose bytes read are counted against the part's byte limit: the
    limit holds for the decompressed bytes, whatever the compressed file's size. `peek`
    reads ahead; what it read is handed out again by the next reads, counted once."""

    def __init__(self, f: Any, limits: PartLimits, name: str) -> None:
        self._f, self._limits, self._name = f, limits, name
        self.count = 0
        self.closed = False
        self._ahead = b""

    def peek(self, size: int) -> bytes:
        """The next `size` bytes (fewer at the end), left for the next reads: a reader may
        look at a file's head before another reads the whole."""
        if len(self._ahead) < size:
            self._ahead += self._read(size - len(self._ahead))
        return self._ahead[:size]

    def read(self, size: int = -1) -> bytes:
        if not self._ahead:
            return self._read(size)
        if size < 0:
            data, self._ahead = self._ahead + self._read(-1), b""
        else:
            data, self._ahead = self._ahead[:size], self._ahead[size:]
        return data

    def _read(self, size: int) -> bytes:
        data = bytes(self._f.read(size))
        self.count += len(data)
        self._limits.check_bytes(self.count, self._name)
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def read_columns(
    f: Any, fmt: str, columns: Mapping[str, str], name: str, limits: PartLimits
) -> pa.Table:
    """The columns of `f` (a binary file object, already decompressed) that `columns`
    (role → column name) names, read as a stream in `fmt` ("parquet", "csv", "jsonl")
    within `limits`. A column the file lacks is a MonitorError naming what it has; a bad
    line names its number; PartTooLarge over a limit."""
    import pyarrow.parquet as pq

    wanted = list(dict.fromkeys(columns.values()))
    try:
        if fmt == "parquet":
            parquet = pq.ParquetFile(f)
            _check_present(parquet.schema_arrow.names, columns, name)
            limits.check_rows(parquet.metadata.num_rows, name)  # before a byte is read
            batches = parquet.iter_batches(batch_size=BATCH_ROWS, columns=wanted)
            return _gathered(((b, b.nbytes) for b in batches), wanted, name, limits)
        counted = _Counted(f, limits, name)
        if fmt == "csv":
            return _csv(counted, columns, name, limits)
        return _jsonl(counted, columns, name, limits)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise MonitorError(f"{name}: cannot read it as {fmt}: {exc}") from None


def _gathered(
    batches: Iterator[tuple[pa.RecordBatch | pa.Table, int]],
    wanted: list[str],
    name: str,
    limits: PartLimits,
) -> pa.Table:
    """The batches' `wanted` columns as one table, counting rows (and `size`, the bytes
    each stands for, where the stream does not count them) against `limits`."""
    tables: list[pa.Table] = []
    rows = size = 0
    for batch, nbytes in batches:
        rows, size = rows + batch.num_rows, size + nbytes
        limits.check_rows(rows, name)
        limits.check_bytes(size, name)
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        tables.append(table.select([c for c in wanted if c in table.column_names]))
    return _concat(tables, wanted)


def _concat(tables: list[pa.Table], wanted: list[str]) -> pa.Table:
    """One table of the pieces' columns: a column a piece lacks is null there, and a
    column whose pieces disagree on its type (ids 7, then "x7") is text throughout."""
    if not tables:
        return pa.table({})
    present = [c for c in wanted if any(c in t.column_names for t in tables)]
    columns: dict[str, pa.ChunkedArray] = {}
    for column in present:
        chunks = [t.column(column) if column in t.column_names else None for t in tables]
        kinds = {c.type for c in chunks if c is not None and c.type != pa.null()}
        kind = kinds.pop() if len(kinds) == 1 else pa.null() if not kinds else pa.string()
        columns[column] = pa.chunked_array(
            [
                pa.nulls(len(t), kind) if c is None else c.cast(kind)
                for c, t in zip(chunks, tables, strict=True)
            ],
            kind,
        )
    return pa.table(columns)


def _check_present(names: list[str], columns: Mapping[str, str], name: str) -> None:
    for role, column in columns.items():
        if column not in names:
            raise MonitorError(
                f"{name}: no {role} column {column!r} (it has {', '.join(names)});"
                f" name it with --{role}-column"
            )


def _csv(f: _Counted, columns: Mapping[str, str], name: str, limits: PartLimits) -> pa.Table:
    """A CSV's columns, a block at a time; its header is read first, to name the
    columns it has when one is missing. Ids are kept as written ("007" stays itself)."""
    import pyarrow.csv as pacsv

    head = f.peek(CSV_BLOCK)
    end = head.find(b"\n")
    header = pacsv.read_csv(io.BytesIO(head if end < 0 else head[: end + 1]))
    _check_present(header.column_names, columns, name)
    options = pacsv.ConvertOptions(
        include_columns=list(dict.fromkeys(columns.values())),
        column_types={columns["id"]: pa.string()} if "id" in columns else None,
    )
    reader = pacsv.open_csv(
        f,
        read_options=pacsv.ReadOptions(block_size=CSV_BLOCK),
        convert_options=options,
    )
    return _gathered(((b, 0) for b in reader), list(columns.values()), name, limits)


def _jsonl(f: _Counted, columns: Mapping[str, str], name: str, limits: PartLimits) -> pa.Table:
    """JSON lines in blocks of whole lines, each checked, then parsed by Arrow alone."""
    from thresher.sources.lines import blocks

    wanted = list(dict.fromkeys(columns.values()))
    first_names: list[str] | None = None

    def parsed() -> Iterator[tuple[pa.Table, int]]:
        nonlocal first_names
        line = 1  # the number of the block's first line
        for block in blocks(f, -1):
            if not isinstance(block, bytes):  # a line too long to hold
                raise MonitorError(f"{name} line {line}: {block.message}")
            table = _json_block(block, name, line)
            first_names = table.column_names if first_names is None else first_names
            line += block.count(b"\n")
            yield table, 0

    table = _gathered(parsed(), wanted, name, limits)
    if any(column not in table.column_names for column in columns.values()):
        _check_present(first_names or [], columns, name)
    return table


def _json_block(block: bytes, name: str, line: int) -> pa.Table:
    """One block of lines, checked and parsed; a bad one names its line."""
    import pyarrow.json as pajson

    from thresher.sources.jsonl import check_lines

    try:
        check_lines(block)
        options = pajson.ReadOptions(block_size=len(block) + 1, use_threads=False)
        return pajson.read_json(io.BytesIO(block), read_options=options)
    except ValueError as exc:  # ArrowInvalid, TooDeep and UnicodeDecodeError among them
        raise MonitorError(_bad_line(block, name, line, str(exc))) from None


def _bad_line(block: bytes, name: str, first: int, message: str) -> str:
    """The first line of `block` that is not a JSON object within the nesting limit,
    and why; Arrow's `message` for the block when each line reads alone."""
    from thresher.sources.jsonl import check_lines

    for number, line in enumerate(block.split(b"\n"), start=first):
        if not line.strip():
            continue
        try:
            check_lines(line)
            if not isinstance(json.loads(line), dict):
                raise ValueError("not a JSON object {...}")
        except ValueError as exc:
            return f"{name} line {number}: cannot read it as jsonl: {_short(exc)}"
    last = first + block.count(b"\n")
    return f"{name} lines {first}-{last}: cannot read them as jsonl: {message}"


def _short(exc: ValueError) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "…"
