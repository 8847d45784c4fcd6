"""A job's results and errors as one streamed download.

The part files are read in name order — input order — and sent one after another: as they
are when the stored format is the one asked for (a CSV part's header only once), or
converted with pyarrow when it is not. Memory holds one part at a time, never the output.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from thresher.errors import SinkError, SpecError
from thresher.service.policies.disclosure import hide_private_paths
from thresher.sinks import open_sink
from thresher.sinks.files import FileSink
from thresher.sinks.parts import read_part
from thresher.spec import SinkSection

CHUNK = 1024 * 1024
MEDIA_TYPES = {
    "jsonl": "application/x-ndjson",
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
}


def output_of(section: SinkSection) -> FileSink:
    """The sink a service job wrote (a local file sink): it lists what it published. A
    job that sent its output to a Kafka topic kept it as Parquet in its staging folder;
    one that wrote a table has no results download (SinkError naming the table)."""
    if section.format == "kafka" and section.staging is not None:
        return FileSink(section.staging.rstrip("/"), "parquet")
    sink = open_sink(section)
    if not isinstance(sink, FileSink):
        raise SinkError(
            f"the job wrote its results to the {section.format} table {section.uri}; read them"
            " there (its status says the version it made)"
        )
    return sink


def job_error_parts(section: SinkSection, job_id: str) -> list[Path]:
    """Job `job_id`'s published error parts (JSONL), in name order: its output folder's
    `_errors/`, or, for a table output, its own parts of the table's side folder (other
    jobs writing the table keep theirs there too). SinkError when the table cannot be
    found (its catalog gone)."""
    if section.format not in ("delta", "iceberg"):
        return error_parts(output_of(section))
    try:
        side = open_sink(section).side_dir  # type: ignore[attr-defined]
    except (SpecError, SinkError) as exc:
        raise SinkError(f"the job's table {section.uri} cannot be read now: {exc}") from None
    ours = (f"part-{job_id}-", f"part-{job_id}.r")  # the job's, and its retry rounds'
    found = error_parts(FileSink(side, "parquet"))
    return [part for part in found if part.name.startswith(ours)]


def result_parts(sink: FileSink) -> list[Path]:
    """A job's published result parts, in name (= input) order."""
    return [Path(url) for url in sink.published_parts()]


def error_parts(sink: FileSink) -> list[Path]:
    """A job's published error parts (JSONL), in name order."""
    return [Path(url) for url in sink.published_error_parts()]


def stream_parts(parts: list[Path], stored: str, wanted: str) -> Iterator[bytes]:
    """The parts as one file of format `wanted`, in chunks."""
    if wanted == "parquet" and (stored != "parquet" or len(parts) != 1):
        yield from _as_parquet(parts, stored)
    elif wanted == stored:
        yield from _raw(parts, skip_header=stored == "csv")
    else:
        for index, part in enumerate(parts):
            yield _encode(read_part(part, stored), wanted, first=index == 0)


def stream_errors(parts: list[Path], wanted: str, private_roots: list[str]) -> Iterator[bytes]:
    """The error records as one file of format `wanted`. A path under one of the server's
    `private_roots` (an uploaded file), in a record's `source` or `message`, is shown by its
    file name alone, so no server-side path reaches a tenant."""
    for index, part in enumerate(parts):
        with part.open("r", encoding="utf-8") as f:
            rows = [_hide_source(json.loads(line), private_roots) for line in f if line.strip()]
        if wanted == "jsonl":
            yield "".join(json.dumps(r, default=str) + "\n" for r in rows).encode("utf-8")
        elif wanted == "csv":
            yield _encode(pa.Table.from_pylist(rows), "csv", first=index == 0)
    if wanted == "parquet":
        yield from _as_parquet(parts, "jsonl", lambda row: _hide_source(row, private_roots))


def _hide_source(row: dict[str, Any], private_roots: list[str]) -> dict[str, Any]:
    for key in ("source", "message"):
        if isinstance(row.get(key), str):
            row[key] = hide_private_paths(row[key], private_roots)
    return row


def _raw(parts: list[Path], skip_header: bool) -> Iterator[bytes]:
    for index, part in enumerate(parts):
        with part.open("rb") as f:
            if skip_header and index > 0:
                f.readline()
            while chunk := f.read(CHUNK):
                yield chunk


def _encode(table: pa.Table, wanted: str, first: bool) -> bytes:
    if wanted == "jsonl":
        rows = table.to_pylist()
        return "".join(json.dumps(r, default=str) + "\n" for r in rows).encode("utf-8")
    buffer = io.BytesIO()
    pacsv.write_csv(table, buffer, pacsv.WriteOptions(include_header=first))
    return buffer.getvalue()


class _Chunks:
    """A write-only file that keeps what is written until it is taken."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> int:
        self.pieces.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        """Nothing is buffered here."""

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        data, self.pieces = b"".join(self.pieces), []
        return data


def _as_parquet(
    parts: list[Path],
    stored: str,
    fix_row: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Iterator[bytes]:
    """One Parquet file, one row group (or more) per part. The schema is every part's
    unified before the first byte goes (a column all null in one part and numbers in the
    next is a number column), so a part never fails after the 200 has been sent. `fix_row`,
    if given, rewrites each row first. Parts are read twice, one at a time, never all."""

    def tables() -> Iterator[pa.Table]:
        for part in parts:
            table = read_part(part, stored)
            if fix_row is not None:
                table = pa.Table.from_pylist([fix_row(r) for r in table.to_pylist()])
            yield table

    if stored == "parquet" and fix_row is None:
        schemas = [pq.read_schema(part) for part in parts]
    else:
        schemas = [table.schema for table in tables()]
    schema = pa.unify_schemas(schemas, promote_options="permissive") if schemas else pa.schema([])
    sink = _Chunks()
    writer = pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema)
    for table in tables():
        writer.write_table(conform(table, schema))
        yield sink.take()
    writer.close()
    yield sink.take()


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema`'s columns in its order: its own cast, the ones it lacks null."""
    present = set(table.column_names)
    columns = [
        table.column(field.name).cast(field.type)
        if field.name in present
        else pa.nulls(table.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)
