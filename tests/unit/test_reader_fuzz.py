"""Fuzzing the CSV and JSONL readers: whatever a file holds, every line lands once.

Hypothesis writes files that mix good records with corrupt lines (quotes left open, the
wrong number of columns, invalid UTF-8, NUL bytes, nesting past the depth limit, numbers
past int64 and floats in the id column, lines past the record size limit, arbitrary
bytes), with LF or CRLF endings, blank lines and a missing last newline, and reads them
through the real source: plan, pickle the shards and the reader as a worker gets them, read
every shard (tiny shards and read blocks, so lines straddle both). The promise checked
every time: each input line is in exactly one place, the output rows or the error
records, at its own line number; blank lines are in neither; a good line comes back with
its values; a line that is bad whatever the schema is an error record with its raw text.

CI runs 50 examples per test. For a longer run on demand, set the number:

    THRESHER_FUZZ_EXAMPLES=5000 pytest tests/unit/test_reader_fuzz.py
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from unittest.mock import patch

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sources import ReadResult, read_all, source

from thresher.sources import lines
from thresher.sources.nesting import MAX_DEPTH

FUZZ = settings(
    max_examples=int(os.environ.get("THRESHER_FUZZ_EXAMPLES", "50")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LONG = 2048  # MAX_RECORD_BYTES while fuzzing, so that a long line is cheap to write

ALWAYS, IF_ID_INT, IF_A_FLOAT, UNKNOWN = "always", "id is int64", "a is float64", "unknown"


@dataclass(frozen=True)
class Line:
    """One line as written (without its line end), and what must become of it."""

    raw: bytes
    kind: str
    bad: str | None = None  # when it must be an error record: ALWAYS, IF_…, UNKNOWN
    id: int | None = None  # a good line's values
    a: float | None = None
    t: str | None = None

    @property
    def blank(self) -> bool:
        return not self.raw.strip()


# --- what a file holds ---------------------------------------------------------------------

texts = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\r\n"), max_size=12)
plain = st.text(st.sampled_from("abc xyz,;:-_"), max_size=8)  # no quote, no newline
numbers = st.floats(allow_nan=False, allow_infinity=False, width=64)


def csv_good(row_id: int, a: float, t: str) -> Line:
    quoted = '"' + f"t{t}".replace('"', '""') + '"'
    return Line(f"{row_id},{a!r},{quoted}".encode(), "good", id=row_id, a=a, t=f"t{t}")


def jsonl_good(row_id: int, a: float, t: str) -> Line:
    raw = json.dumps({"id": row_id, "a": a, "t": f"t{t}"}).encode()
    return Line(raw, "good", id=row_id, a=a, t=f"t{t}")


@st.composite
def csv_bad(draw: st.DrawFn, row_id: int) -> Line:
    a, t = draw(numbers), draw(plain)
    kinds = {
        "too few columns": (f"{row_id},{a!r}".encode(), ALWAYS),
        "too many columns": (f'{row_id},{a!r},"t{t}",extra'.encode(), ALWAYS),
        "quote left open": (f'{row_id},{a!r},"t{t}'.encode(), ALWAYS),
        "invalid UTF-8": (f'{row_id},{a!r},"t{t}'.encode() + b'\xff\xfe"', ALWAYS),
        "too long": (f'{row_id},{a!r},"{"x" * (LONG + 1)}"'.encode(), ALWAYS),
        "float id": (f"{row_id}.5,{a!r},t".encode(), IF_ID_INT),
        "id past int64": (f"{10**20 + row_id},{a!r},t".encode(), IF_ID_INT),
        "text for a": (f"{row_id},abc{t},t".encode(), IF_A_FLOAT),
        "NUL in a": (f"{row_id},1\x002,t".encode(), IF_A_FLOAT),
        "NUL in t": (f'{row_id},{a!r},"t\x00{t}"'.encode(), UNKNOWN),
        "bytes": (draw(st.binary(max_size=40)).replace(b"\n", b""), UNKNOWN),
    }
    kind = draw(st.sampled_from(sorted(kinds)))
    raw, bad = kinds[kind]
    return Line(raw, kind, bad)


@st.composite
def jsonl_bad(draw: st.DrawFn, row_id: int) -> Line:
    a, t = draw(numbers), draw(plain)
    good = json.dumps({"id": row_id, "a": a, "t": f"t{t}"}).encode()
    levels = draw(st.integers(MAX_DEPTH, 3 * MAX_DEPTH))
    kinds = {
        "nested too deep": (good[:-1] + b', "d": ' + b"[" * levels + b"]" * levels + b"}", ALWAYS),
        "truncated": (good[: draw(st.integers(1, len(good) - 1))], ALWAYS),
        "invalid UTF-8": (good[:-2] + b'\xff"}', ALWAYS),
        "invalid UTF-8 key": (good[:-1] + b', "k\x97": 1}', ALWAYS),
        "not an object": (draw(st.sampled_from([b"[1, 2]", b"42", b"null", b'"s"'])), ALWAYS),
        "too long": (good[:-2] + b"x" * (LONG + 1) + b'"}', ALWAYS),
        "float id": (json.dumps({"id": row_id + 0.5, "a": a}).encode(), IF_ID_INT),
        "id past int64": (json.dumps({"id": 10**20 + row_id, "a": a}).encode(), IF_ID_INT),
        "text for a": (json.dumps({"id": row_id, "a": f"abc{t}"}).encode(), IF_A_FLOAT),
        "raw NUL": (good[:-2] + b'\x00"}', UNKNOWN),
        "bytes": (draw(st.binary(max_size=40)).replace(b"\n", b""), UNKNOWN),
    }
    kind = draw(st.sampled_from(sorted(kinds)))
    raw, bad = kinds[kind]
    return Line(raw, kind, bad)


@dataclass(frozen=True)
class Written:
    """A fuzzed file: its bytes, and each record line by its 1-based number."""

    fmt: str
    data: bytes
    lines: dict[int, tuple[bytes, Line]]  # number -> (the bytes before its "\n", the line)


@st.composite
def files(draw: st.DrawFn, fmt: str) -> Written:
    bad_share = draw(st.sampled_from([0, 5, 20, 30]))  # percent of the lines
    good, bad = (csv_good, csv_bad) if fmt == "csv" else (jsonl_good, jsonl_bad)
    written: list[Line] = []
    for row_id in range(draw(st.integers(1, 40))):
        roll = draw(st.integers(0, 99))
        if roll < 8:
            written.append(Line(draw(st.sampled_from([b"", b"  ", b"\t"])), "blank"))
        elif roll < 8 + bad_share:
            written.append(draw(bad(row_id)))
        else:
            written.append(good(row_id, draw(numbers), draw(texts)))
    if not any(line.kind == "good" for line in written):
        written.append(good(len(written), draw(numbers), draw(texts)))
    end = b"\r\n" if draw(st.booleans()) else b"\n"
    raws = ([b"id,a,t"] if fmt == "csv" else []) + [line.raw for line in written]
    bom = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    data = bom + end.join(raws) + (end if draw(st.booleans()) else b"")
    held = data.split(b"\n")
    first = 2 if fmt == "csv" else 1
    numbered = {first + i: (held[first - 1 + i], line) for i, line in enumerate(written)}
    return Written(fmt, data, numbered)


# --- the promise ---------------------------------------------------------------------------


def placed_rows(result: ReadResult) -> dict[int, list[dict[str, object]]]:
    """The output rows by the line number the reader gives each."""
    rows: dict[int, list[dict[str, object]]] = {}
    for shard, chunk in result.chunks:
        for position, row in zip(chunk.positions, chunk.table.to_pylist(), strict=True):
            kind, number = result.reader.locate(shard, int(position))
            assert kind == "line"
            rows.setdefault(number, []).append(row)
    return rows


def check_once_each(written: Written, result: ReadResult) -> None:
    rows, errors = placed_rows(result), Counter(b.line for b in result.bad)
    twice = sorted(n for n, r in rows.items() if len(r) > 1) + sorted(
        n for n, count in errors.items() if count > 1
    )
    both = sorted(rows.keys() & errors.keys())
    strays = sorted((rows.keys() | errors.keys()) - written.lines.keys(), key=str)
    assert (twice, both, strays) == ([], [], []), "lines twice, in both, or not in the file"
    schema = result.plan.schema
    for number, (held, line) in written.lines.items():
        where = f"line {number} ({line.kind}): {held!r}"
        if not held.strip():
            assert number not in rows and number not in errors, f"{where}: blank, yet placed"
        elif len(held) > LONG or must_be_bad(line, schema, written.fmt):
            assert number in errors, f"{where}: not an error record"
        elif line.kind == "good":
            assert number in rows, f"{where}: not in the output"
            check_values(rows[number][0], line, schema, where)
        else:
            assert number in rows or number in errors, f"{where}: lost"


def must_be_bad(line: Line, schema: pa.Schema, fmt: str) -> bool:
    """Whether the reader must put `line` in the errors. A JSON number where the column was
    inferred as text is one (JSON says which type a value is, and it changed: pyarrow's
    "Column(/a) changed from string to number"), as text where it was inferred a float is;
    CSV's values are text, so a number in a text column is its text."""
    if fmt == "jsonl" and isinstance(line.a, float) and pa.types.is_string(schema.field("a").type):
        return True
    if line.bad == IF_ID_INT:
        return bool(schema.field("id").type == pa.int64())
    if line.bad == IF_A_FLOAT:
        return bool(schema.field("a").type == pa.float64())
    return line.bad == ALWAYS


def check_values(row: dict[str, object], line: Line, schema: pa.Schema, where: str) -> None:
    expected_id = line.id if schema.field("id").type == pa.int64() else str(line.id)
    assert (row["id"], row["t"]) == (expected_id, line.t), f"{where}: {row}"
    assert row["a"] == line.a or float(str(row["a"])) == line.a, f"{where}: {row}"


def check_error_records(written: Written, result: ReadResult, path: Path) -> None:
    for bad in result.bad:
        assert bad.line is not None
        held, line = written.lines[bad.line]
        where = f"line {bad.line} ({line.kind}): {bad}"
        assert (bad.source, bad.stage) == (str(path), "decode"), where
        assert bad.message and "\n" not in bad.message, where
        if len(held) > LONG:
            assert bad.error == "RecordTooLong", where
        assert bad.raw == expected_raw(held, len(held) > LONG), where


def expected_raw(held: bytes, too_long: bool) -> str:
    kept = held[:1024] if too_long else held.removesuffix(b"\r")
    return kept.decode("utf-8", errors="backslashreplace")


def read_written(written: Written, shard_bytes: int, read_block: int) -> None:
    with (
        tempfile.TemporaryDirectory() as folder,
        patch.object(lines, "READ_BLOCK", read_block),
        patch.object(lines, "MAX_RECORD_BYTES", LONG),
    ):
        path = Path(folder) / f"fuzz.{written.fmt}"
        path.write_bytes(written.data)
        # The csv / jsonl plug-in's own source, with shards smaller than a spec allows.
        planned = replace(source(path, written.fmt, keep=["t"]), shard_bytes=shard_bytes)
        result = read_all(planned, rows_per_chunk=7)
        check_once_each(written, result)
        check_error_records(written, result, path)


block_sizes = st.one_of(st.integers(1, 100), st.sampled_from([4096, lines.READ_BLOCK]))


@FUZZ
@given(written=files("csv"), shard_bytes=st.integers(1, 400), read_block=block_sizes)
def test_fuzzed_csv_lines_each_land_once(
    written: Written, shard_bytes: int, read_block: int
) -> None:
    read_written(written, shard_bytes, read_block)


@FUZZ
@given(written=files("jsonl"), shard_bytes=st.integers(1, 400), read_block=block_sizes)
def test_fuzzed_jsonl_lines_each_land_once(
    written: Written, shard_bytes: int, read_block: int
) -> None:
    read_written(written, shard_bytes, read_block)
