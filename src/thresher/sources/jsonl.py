"""JSON Lines: one object per line, the schema inferred once from a sample, then fixed."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.json as pajson

from thresher.sources.nesting import check_depth

# A line whose first non-blank byte is not `{` (searched from a newline: memchr speed).
_NOT_AN_OBJECT = re.compile(rb"\n[ \t\r]*[^{ \t\r\n]")
_BOM = b"\xef\xbb\xbf"
_CONVERSION = re.compile(r"Failed to convert JSON to (\w+), couldn't parse:(.*)")


@dataclass(frozen=True)
class JsonlFormat:
    @property
    def suffixes(self) -> tuple[str, ...]:
        return (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".jsonl.zst")

    @property
    def untyped(self) -> bool:
        return False

    @property
    def has_header(self) -> bool:
        return False

    def header(self, first_line: bytes) -> list[str]:
        return []  # never asked: JSON Lines have no header line

    def infer(self, sample: bytes, names: list[str] | None) -> pa.Schema:
        check_lines(sample)
        table = pajson.read_json(
            io.BytesIO(sample), read_options=pajson.ReadOptions(block_size=len(sample) + 1)
        )
        return table.schema

    def parse(self, data: bytes, schema: pa.Schema) -> pa.Table:
        check_lines(data)
        try:
            return self._read(data, schema)
        except pa.ArrowInvalid as exc:
            raise pa.ArrowInvalid(_explain(str(exc), data, schema)) from exc

    def _read(self, data: bytes, schema: pa.Schema) -> pa.Table:
        return pajson.read_json(
            io.BytesIO(data),
            read_options=pajson.ReadOptions(
                block_size=max(len(data) + 1, 1 << 20), use_threads=False
            ),
            parse_options=pajson.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )


def check_lines(data: bytes) -> None:
    """What Arrow must never be given: lines that are not objects, nest too deep, or are
    not UTF-8. Arrow copies invalid UTF-8 into text values unchecked, and into the names
    of the columns it infers, which then cannot even be listed (a UnicodeDecodeError from
    `schema.names`); decoding first (about a millisecond per MiB) makes the line a bad
    record, like any other."""
    _check_objects(data)
    check_depth(data)
    data.decode("utf-8")


def _check_objects(data: bytes) -> None:
    """Refuse lines that are not JSON objects before Arrow sees them: Arrow reads a bare
    `null` line as a row of nulls, and crashes the process (SIGSEGV) on a block that
    starts with one. The search costs a few percent of Arrow's parse."""
    body = data.removeprefix(_BOM).lstrip(b" \t\r\n")
    if body[:1] not in (b"", b"{") or _NOT_AN_OBJECT.search(body):
        # Arrow's own error type and wording, like every other line it cannot parse.
        raise pa.ArrowInvalid("JSON parse error: a line is not a JSON object {...}")


def _explain(message: str, data: bytes, schema: pa.Schema) -> str:
    """Arrow's message, naming the column where Arrow does not: a number that does not
    fit an integer column (`1.5` or `1e30` for an int64 id) says only the value. Worked
    out for one line, the last step of isolating a bad one; a block keeps the message."""
    conversion = _CONVERSION.match(message)
    if not conversion or data.strip().count(b"\n"):
        return message
    kind, text = conversion[1], conversion[2]
    try:
        record = json.loads(data)
    except ValueError:
        return message
    for column in schema:
        value = record.get(column.name) if isinstance(record, dict) else None
        if str(column.type) == kind and pa.types.is_integer(column.type) and not _fits(value):
            return f"column {column.name!r}: {text} is not an {kind}"
    return message


def _fits(value: object) -> bool:
    """Whether a JSON value is a whole number inside int64 (or null)."""
    if value is None:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
