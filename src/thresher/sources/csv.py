"""CSV lines: header from the first line, types inferred once from a sample, then fixed."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.csv as pacsv


@dataclass(frozen=True)
class CsvFormat:
    delimiter: str = ","

    @property
    def suffixes(self) -> tuple[str, ...]:
        return (".csv", ".csv.gz", ".csv.bz2", ".csv.zst", ".csv.xz")

    @property
    def untyped(self) -> bool:
        return True

    def header(self, first_line: bytes) -> list[str] | None:
        table = pacsv.read_csv(
            io.BytesIO(first_line + b"\n"),
            read_options=pacsv.ReadOptions(autogenerate_column_names=True),
            parse_options=self._parse_options(),
            convert_options=pacsv.ConvertOptions(column_types={}, strings_can_be_null=False),
        )
        return [str(v) for v in table.slice(0, 1).to_pylist()[0].values()] if table.num_rows else []

    def infer(self, sample: bytes, names: list[str] | None) -> pa.Schema:
        table = pacsv.read_csv(
            io.BytesIO(sample),
            read_options=pacsv.ReadOptions(column_names=names, block_size=len(sample) + 1),
            parse_options=self._parse_options(),
        )
        return table.schema

    def parse(self, data: bytes, schema: pa.Schema) -> pa.Table:
        try:
            return self._read(data, schema)
        except pa.ArrowInvalid as exc:
            raise ValueError(_explain(str(exc), schema)) from exc

    def _read(self, data: bytes, schema: pa.Schema) -> pa.Table:
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(
                column_names=schema.names, block_size=max(len(data) + 1, 1 << 20), use_threads=False
            ),
            parse_options=self._parse_options(),
            convert_options=pacsv.ConvertOptions(column_types=schema),
        )

    def _parse_options(self) -> pacsv.ParseOptions:
        # Byte-range shards cut at newlines, so a newline inside a quoted value is not
        # supported; saying so here keeps Arrow's parser from guessing.
        return pacsv.ParseOptions(delimiter=self.delimiter, newlines_in_values=False)


def _explain(message: str, schema: pa.Schema) -> str:
    """Arrow's CSV message in the user's terms: the column by name, not by number."""
    message = message.strip().splitlines()[0]
    column = re.search(
        r"In CSV column #(\d+): Row #\d+: CSV conversion error to (\w+): (.*)", message
    )
    if column:
        index, type_name, detail = int(column[1]), column[2], column[3]
        name = schema.names[index] if index < len(schema.names) else f"#{index}"
        return f"column {name!r}: {detail} (expected {type_name})"
    count = re.search(r"Expected (\d+) columns, got (\d+)", message)
    if count:
        return f"expected {count[1]} columns ({', '.join(schema.names)}), got {count[2]}"
    return message.removeprefix("CSV parse error: ")
