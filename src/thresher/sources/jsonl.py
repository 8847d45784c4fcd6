"""JSON Lines: one object per line, the schema inferred once from a sample, then fixed."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.json as pajson

from thresher.sources.nesting import check_depth

# A line whose first non-blank byte is not `{` (searched from a newline: memchr speed).
_NOT_AN_OBJECT = re.compile(rb"\n[ \t\r]*[^{ \t\r\n]")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class JsonlFormat:
    @property
    def suffixes(self) -> tuple[str, ...]:
        return (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".jsonl.zst")

    @property
    def untyped(self) -> bool:
        return False

    def header(self, first_line: bytes) -> list[str] | None:
        return None

    def infer(self, sample: bytes, names: list[str] | None) -> pa.Schema:
        _check_lines(sample)
        table = pajson.read_json(
            io.BytesIO(sample), read_options=pajson.ReadOptions(block_size=len(sample) + 1)
        )
        return table.schema

    def parse(self, data: bytes, schema: pa.Schema) -> pa.Table:
        _check_lines(data)
        table = pajson.read_json(
            io.BytesIO(data),
            read_options=pajson.ReadOptions(
                block_size=max(len(data) + 1, 1 << 20), use_threads=False
            ),
            parse_options=pajson.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
        # Arrow's JSON reader copies invalid UTF-8 into text columns unchecked; a full
        # validation (well under a millisecond per MiB) makes such a line a bad record.
        table.validate(full=True)
        return table


def _check_lines(data: bytes) -> None:
    """What Arrow must never be given: lines that are not objects, or nest too deep."""
    _check_objects(data)
    check_depth(data)


def _check_objects(data: bytes) -> None:
    """Refuse lines that are not JSON objects before Arrow sees them: Arrow reads a bare
    `null` line as a row of nulls, and crashes the process (SIGSEGV) on a block that
    starts with one. The search costs a few percent of Arrow's parse."""
    body = data.removeprefix(_BOM).lstrip(b" \t\r\n")
    if body[:1] not in (b"", b"{") or _NOT_AN_OBJECT.search(body):
        # Arrow's own error type and wording, like every other line it cannot parse.
        raise pa.ArrowInvalid("JSON parse error: a line is not a JSON object {...}")
