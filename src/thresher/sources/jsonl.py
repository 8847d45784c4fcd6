"""JSON Lines: one object per line, the schema inferred once from a sample, then fixed."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.json as pajson


@dataclass(frozen=True)
class JsonlFormat:
    @property
    def suffixes(self) -> tuple[str, ...]:
        return (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".jsonl.zst")

    def header(self, first_line: bytes) -> list[str] | None:
        return None

    def infer(self, sample: bytes, names: list[str] | None) -> pa.Schema:
        table = pajson.read_json(
            io.BytesIO(sample), read_options=pajson.ReadOptions(block_size=len(sample) + 1)
        )
        return table.schema

    def parse(self, data: bytes, schema: pa.Schema) -> pa.Table:
        return pajson.read_json(
            io.BytesIO(data),
            read_options=pajson.ReadOptions(
                block_size=max(len(data) + 1, 1 << 20), use_threads=False
            ),
            parse_options=pajson.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
