"""Part files in a directory: their names, their staging names, the atomic commit, and
a shard's bad records (`ErrorPart`, the error part staged beside its output part).

`part-00042.parquet` is shard 42's output; while a worker writes it, it lives under
`_staging/part-00042.<attempt>.parquet`. Committing renames it into place (atomic on local
disks), so a reader never sees half a part and a retried shard never leaves two.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from thresher.errors import BadInputError
from thresher.records import BadRecord
from thresher.sources.files import filesystem, is_local

STAGING = "_staging"


@dataclass(frozen=True)
class StagedPart:
    """What a worker left for the coordinator: one shard's output under an attempt name."""

    shard: int
    attempt: str
    path: str | None  # None when the shard produced no rows
    rows: int


@dataclass(frozen=True)
class PartLayout:
    """Names of one job's parts under `root`. `prefix` carries the job id in append mode."""

    root: str
    prefix: str
    suffix: str
    width: int = 5

    def final(self, shard: int) -> str:
        return f"{self.root}/{self.prefix}{shard:0{self.width}d}{self.suffix}"

    def staging(self, shard: int, attempt: str) -> str:
        name = f"{self.prefix}{shard:0{self.width}d}.{attempt}{self.suffix}"
        return f"{self.root}/{STAGING}/{name}"


def commit_file(staged: StagedPart, layout: PartLayout) -> None:
    """Rename a staged part to its final name in `layout` (see `commit_to`)."""
    commit_to(staged, layout.final(staged.shard))


def commit_to(staged: StagedPart, final: str) -> None:
    """Rename a staged part to `final`. Idempotent: if the staging file is gone and the
    final file exists, an earlier commit already did it. An attempt with no rows removes
    whatever an earlier attempt of the shard left, so the latest attempt decides."""
    fs, dst = filesystem(final)
    if staged.path is None:
        if fs.exists(dst):
            fs.rm(dst)
        return
    _, src = filesystem(staged.path)
    if not fs.exists(src):
        if fs.exists(dst):
            return
        raise FileNotFoundError(f"staged part {staged.path} is missing")
    fs.makedirs(dst.rsplit("/", 1)[0], exist_ok=True)
    move(fs, src, dst)


def move(fs: Any, src: str, dst: str) -> None:
    """A rename: atomic on local disks, the filesystem's move elsewhere."""
    if is_local(fs):
        os.replace(src, dst)
    else:
        fs.mv(src, dst)


class FilePartWriter:
    """Writes a shard's tables to one staging file in Parquet, CSV or JSONL."""

    def __init__(self, path: str, shard: int, attempt: str, file_format: str) -> None:
        self._path, self._shard, self._attempt = path, shard, attempt
        self._format = file_format
        self._file: Any = None
        self._writer: TableWriter | None = None
        self._rows = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self._writer is None:
            self._file = open_for_write(self._path)
            self._writer = _WRITERS[self._format](self._file, table.schema)
        self._writer.write_table(table)
        self._rows += table.num_rows

    def close(self) -> StagedPart:
        if self._writer is None:
            return StagedPart(self._shard, self._attempt, None, 0)
        self._writer.close()
        self._file.close()
        return StagedPart(self._shard, self._attempt, self._path, self._rows)


def read_part(path: str | os.PathLike[str], file_format: str) -> pa.Table:
    """One part file (local path or URL) as an Arrow table. Parquet is read with
    `ParquetFile`, not `pq.read_table`: that goes through pyarrow.dataset's scanner
    (importing pandas), whose threads outliving a script can abort its exit
    ("terminate called without an active exception", apache/arrow#34314; seen once in
    CI after `result.to_pandas()`)."""
    fs, where = filesystem(str(path))
    if file_format == "arrow" and is_local(fs):
        with pa.memory_map(where) as mapped:  # the table's buffers stay mapped, not copied
            return pa.ipc.open_file(mapped).read_all()
    with fs.open(where, "rb") as f:
        if file_format == "arrow":
            return pa.ipc.open_file(pa.py_buffer(f.read())).read_all()
        if file_format == "parquet":
            return pq.ParquetFile(f).read()
        if file_format == "csv":
            return pacsv.read_csv(f)
        data = f.read()
    return pajson.read_json(io.BytesIO(data)) if data else pa.table({})


def read_error_records(path: str) -> list[dict[str, Any]]:
    """The bad records of one error part (JSONL); none if there is no such part."""
    fs, where = filesystem(path)
    if not fs.exists(where):
        return []
    with fs.open(where, "r", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class ErrorPart:
    """A shard's bad records, staged as JSONL beside its output part."""

    def __init__(self, path: str, fail_fast: bool) -> None:
        self._path = path
        self._fail_fast = fail_fast
        self._file: Any = None
        self.count = 0

    def add(self, record: BadRecord) -> None:
        if self._fail_fast:
            raise BadInputError(
                f"bad record at {record.where()}: {record.message} "
                '(errors.on_bad_input = "fail"; set it to "skip" to route such records '
                "to _errors/ and go on)"
            )
        self.add_line(record.to_json())

    def add_all(self, records: Iterable[BadRecord]) -> None:
        for record in records:
            self.add(record)

    def add_line(self, line: str) -> None:
        """Write one error record that is already JSON (kept from an earlier error file)."""
        if self._file is None:
            self._file = open_for_write(self._path)
        self._file.write((line + "\n").encode("utf-8"))
        self.count += 1

    def close(self, shard: int, attempt: str) -> StagedPart:
        if self._file is None:
            return StagedPart(shard, attempt, None, 0)
        self._file.close()
        return StagedPart(shard, attempt, self._path, self.count)


def open_for_write(url: str) -> Any:
    """A new binary file at `url`, its folder made first."""
    fs, path = filesystem(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    return fs.open(path, "wb")


class TableWriter(Protocol):
    def write_table(self, table: pa.Table) -> None: ...

    def close(self) -> None: ...


class JsonlWriter:
    """One JSON object per row. NaN and infinity are refused, never written as bad JSON."""

    def __init__(self, file: Any, schema: pa.Schema) -> None:
        self._file = file

    def write_table(self, table: pa.Table) -> None:
        lines = (json.dumps(row, default=str, allow_nan=False) for row in table.to_pylist())
        self._file.write(("\n".join(lines) + "\n").encode("utf-8"))

    def close(self) -> None:
        """The file is closed by its owner."""


class ParquetPartWriter:
    """Parquet, zstd, with a dictionary only for the columns it can pay for.

    Floats (probabilities, scores, embeddings) and columns whose first rows are nearly all
    distinct (the id column, unique by definition; a kept free-text column) get none: it
    never pays for them, and Arrow's writer hashes every value of a row group into one
    before it gives up, if it does at all (a row group's 65,536 int64 ids fit its page).
    For a job's id column that took 4-6 ms of every 65,536-row chunk, three times the rest
    of the write, and made the file larger (zstd packs plain ids better)."""

    def __init__(self, file: Any, schema: pa.Schema) -> None:
        self._file, self._schema = file, schema
        self._writer: Any = None

    def write_table(self, table: pa.Table) -> None:
        if self._writer is None:  # decided on the first rows written
            coded = [field.name for field in self._schema if _repeats(table.column(field.name))]
            self._writer = pq.ParquetWriter(
                self._file, self._schema, compression="zstd", use_dictionary=coded
            )
        self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


DISTINCT_SAMPLE = 4096  # the first rows a column's repetition is judged by
MOSTLY_DISTINCT = 0.9


def _repeats(column: pa.ChunkedArray) -> bool:
    """Whether a column's values repeat enough for a dictionary: not floats, and not
    nearly all distinct in its first rows. Nested values (a classifier's top-k labels)
    are not judged: Arrow counts no distinct lists."""
    if _floating(column.type) or pa.types.is_nested(column.type):
        return False
    first = column.slice(0, DISTINCT_SAMPLE)
    valid = len(first) - int(first.null_count)
    distinct: int = pc.count_distinct(first).as_py()
    return bool(valid < 64 or distinct < MOSTLY_DISTINCT * valid)


def _floating(kind: pa.DataType) -> bool:
    """Floats, or lists of them."""
    while (
        pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind) or pa.types.is_large_list(kind)
    ):
        kind = kind.value_type
    return bool(pa.types.is_floating(kind))


def _csv_writer(file: Any, schema: pa.Schema) -> TableWriter:
    return pacsv.CSVWriter(file, schema)  # type: ignore[no-any-return]


def _arrow_writer(file: Any, schema: pa.Schema) -> TableWriter:
    return pa.ipc.new_file(file, schema)  # type: ignore[no-any-return]


_WRITERS: dict[str, Callable[[Any, pa.Schema], TableWriter]] = {
    "parquet": ParquetPartWriter,
    "csv": _csv_writer,
    "jsonl": JsonlWriter,
    "arrow": _arrow_writer,
}
