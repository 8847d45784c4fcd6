"""Reading a part of actuals: ids and their labels from a Parquet, CSV or JSONL file (by
suffix), a SQL query (SQLite or PostgreSQL), or records in memory (a JSON body).

Every part is checked before anything is joined: the id and label columns exist, hold
scalars, and no id or label is null or empty. A problem names where it is, as the
error file does: `labels.csv line 7` (1-based lines for text), `labels.parquet row 6`
(0-based rows), `records[6]`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from thresher.errors import MonitorError
from thresher.monitor.part_reader import PartLimits, read_columns

__all__ = ["LabelledIds", "from_records", "from_table", "read_file", "read_query"]

SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl",
            ".ndjson": "jsonl", ".json": "jsonl"}  # fmt: skip
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}  # Arrow's names


@dataclass(frozen=True)
class LabelledIds:
    """A part as read: `ids` and `labels` of equal length, in the part's row order;
    `locate(i)` says where row i came from."""

    source: str
    ids: pa.Array
    labels: pa.Array
    locate: Callable[[int], str]


def read_file(
    uri: str,
    id_column: str,
    label_column: str,
    shown: str | None = None,
    limits: PartLimits | None = None,
) -> LabelledIds:
    """A Parquet, CSV or JSONL file (local, or any fsspec URL), by its suffix (text may be
    compressed: `.csv.gz`, `.jsonl.zst`), streamed by record batch with only the two
    columns kept, within `limits` (rows and decompressed bytes; none by default).
    Messages name it `shown` (default: `uri`)."""
    from thresher.sources.files import filesystem

    name = shown or uri
    fmt, compression = _format(uri)
    fs, path = filesystem(uri)
    columns = {"id": id_column, "label": label_column}
    try:
        with fs.open(path, "rb") as raw:
            f = pa.input_stream(raw, compression=compression) if compression else raw
            table = read_columns(f, fmt, columns, name, limits or PartLimits())
    except FileNotFoundError:
        raise MonitorError(f"{name}: no such file") from None
    if fmt == "parquet":
        return from_table(table, name, id_column, label_column, lambda i: f"{name} row {i}")
    if fmt == "csv":
        # The header is line 1; a quoted field spanning lines would shift later numbers.
        return from_table(table, name, id_column, label_column, lambda i: f"{name} line {i + 2}")

    def line(record: int) -> str:
        return _jsonl_line(fs, path, compression, name, record)

    return from_table(table, name, id_column, label_column, line)


def read_query(query: str, url: str, id_column: str, label_column: str) -> LabelledIds:
    """The result of `query` on a `sqlite:///path.db` or `postgresql://…` database."""
    table = _query(query, url)
    shown = re.sub(r"\s+", " ", query).strip()[:80]
    where = f"{_redacted(url)} ({shown})"
    return from_table(table, where, id_column, label_column, lambda i: f"{where} row {i}")


def from_records(records: Sequence[Mapping[str, Any]], source: str = "records") -> LabelledIds:
    """`[{"id": …, "label": …}, …]`, as a JSON body brings them."""
    for index, record in enumerate(records):
        missing = [key for key in ("id", "label") if key not in record]
        if missing:
            raise MonitorError(f"{source}[{index}]: no {missing[0]!r} field")
    table = pa.table({key: _one_type([r[key] for r in records]) for key in ("id", "label")})
    return from_table(table, source, "id", "label", lambda i: f"{source}[{i}]")


def _one_type(values: list[Any]) -> pa.Array:
    """JSON values as one Arrow array: as they are when they share a type, else as text
    (an id 7 and an id "x7" in one body)."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        text = [v if v is None or isinstance(v, str) else json.dumps(v) for v in values]
        return pa.array(text, pa.string())


def from_table(
    table: pa.Table,
    source: str,
    id_column: str,
    label_column: str,
    locate: Callable[[int], str] | None = None,
) -> LabelledIds:
    """A part from a table in hand; `locate` names row i (default: `source row i`)."""
    where = locate or (lambda i: f"{source} row {i}")
    for role, name in (("id", id_column), ("label", label_column)):
        if name not in table.column_names:
            raise MonitorError(
                f"{source}: no {role} column {name!r} (it has {', '.join(table.column_names)});"
                f" name it with --{role}-column"
            )
    ids = _checked(table.column(id_column), "id", id_column, where)
    labels = _checked(table.column(label_column), "label", label_column, where)
    return LabelledIds(source, ids, labels, where)


def _checked(
    column: pa.ChunkedArray, role: str, name: str, where: Callable[[int], str]
) -> pa.Array:
    """The column as one array of scalars, without a null (or an empty text)."""
    values = column.combine_chunks()
    if isinstance(values.type, pa.DictionaryType):
        values = values.dictionary_decode()
    if not (pa.types.is_primitive(values.type) or _is_text(values.type)):
        raise MonitorError(f"{where(0)}: {role} column {name!r} is {values.type}, not a scalar")
    bad = pc.is_null(values, nan_is_null=True)
    if _is_text(values.type):
        bad = pc.or_(bad, pc.equal(pc.utf8_trim_whitespace(values.cast(pa.string())), ""))
    if pc.any(bad).as_py():
        first = pc.index(bad, True).as_py()
        hint = "" if role == "id" else "; leave out rows whose outcome is not known yet"
        raise MonitorError(f"{where(first)}: {role} column {name!r} is empty{hint}")
    return values


def _is_text(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))


def _format(uri: str) -> tuple[str, str | None]:
    """The file's format and its compression (Arrow's name), by its suffixes."""
    suffixes = [s.lower() for s in PurePath(uri.split("?", maxsplit=1)[0]).suffixes]
    compression = COMPRESSIONS.get(suffixes[-1]) if suffixes else None
    if compression is not None:
        suffixes = suffixes[:-1]
    if suffixes and suffixes[-1] in SUFFIXES and not (compression and suffixes[-1] == ".parquet"):
        return SUFFIXES[suffixes[-1]], compression
    raise MonitorError(
        f"{uri}: expected a .parquet, .csv or .jsonl file (text may end in .gz, .bz2 or .zst),"
        " by its suffix"
    )


def _jsonl_line(fs: Any, path: str, compression: str | None, name: str, record: int) -> str:
    """The 1-based line of the file's `record`-th JSON record (blank lines hold none),
    read again a block at a time; only asked for a message."""
    from thresher.sources.lines import lines_of

    seen = -1
    with fs.open(path, "rb") as raw:
        f = pa.input_stream(raw, compression=compression) if compression else raw
        for number, line in enumerate(lines_of(f, 1 << 20), start=1):
            seen += isinstance(line, bytes) and bool(line.strip())
            if seen == record:
                return f"{name} line {number}"
    return f"{name} record {record}"


def _query(query: str, url: str) -> pa.Table:
    with closing(_connect(url)) as conn, closing(conn.cursor()) as cur:
        try:
            cur.execute(query)
            table = cur.fetch_arrow_table()
        except Exception as exc:  # the drivers' error classes differ
            first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise MonitorError(f"--query: {_redacted(url)} refused it: {first}") from None
    from thresher.sources.sql import conform, plain_schema

    return conform(table, plain_schema(table.schema))


def _connect(url: str) -> Any:
    """An ADBC connection to the database at `url` (the drivers the SQL sinks use)."""
    if url.startswith("sqlite://"):
        try:
            import adbc_driver_sqlite.dbapi as sqlite_adbc
        except ImportError as exc:
            raise MonitorError("--from: SQLite needs `pip install 'thresher[sqlite]'`") from exc
        return sqlite_adbc.connect(url.removeprefix("sqlite://"))
    if url.startswith(("postgresql://", "postgres://")):
        from thresher.postgres import PgUrl

        return PgUrl.parse(url).connect(MonitorError, "--from")
    raise MonitorError(f"--from: expected sqlite:///path.db or postgresql://…, got {url}")


def _redacted(url: str) -> str:
    from thresher.postgres import without_password

    return without_password(url)
