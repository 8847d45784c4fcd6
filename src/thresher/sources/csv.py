"""CSV lines: header from the first line, types inferred once from a sample, then fixed."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

_BOM = b"\xef\xbb\xbf"
LISTED_NAMES = 20  # column names a message lists before "and N more"


@dataclass(frozen=True)
class CsvFormat:
    delimiter: str = ","

    @property
    def suffixes(self) -> tuple[str, ...]:
        return (".csv", ".csv.gz", ".csv.bz2", ".csv.zst", ".csv.xz")

    @property
    def untyped(self) -> bool:
        return True

    @property
    def has_header(self) -> bool:
        return True

    def header(self, first_line: bytes) -> list[str]:
        # Python's csv module, strict: a header is one line, read once, and Arrow spends
        # about as long on each column of a one-line table as on a thousand rows of it.
        text = first_line.removeprefix(_BOM).decode("utf-8")  # a ValueError if not UTF-8
        try:
            return next(csv.reader([text], delimiter=self.delimiter, strict=True), [])
        except csv.Error as exc:
            raise ValueError(str(exc)) from exc

    def infer(self, sample: bytes, names: list[str] | None) -> pa.Schema:
        sample = _terminated(sample)
        table = pacsv.read_csv(
            io.BytesIO(sample),
            read_options=pacsv.ReadOptions(column_names=names, block_size=len(sample) + 1),
            parse_options=self._parse_options(),
        )
        _check_quotes(sample, table)
        return table.schema

    def parse(self, data: bytes, schema: pa.Schema) -> pa.Table:
        data = _terminated(data)
        try:
            table = self._read(data, schema)
        except pa.ArrowInvalid as exc:
            raise ValueError(_explain(str(exc), schema)) from exc
        _check_quotes(data, table)
        return table

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


def _terminated(data: bytes) -> bytes:
    """`data` ending in a newline, so that a quote left open on its last line takes the
    newline into its value (where `_check_quotes` finds it) rather than ending at EOF."""
    return data if data.endswith(b"\n") else data + b"\n"


def _check_quotes(data: bytes, table: pa.Table) -> None:
    """Refuse a value with a newline in it: with `newlines_in_values` off, Arrow ends a
    quoted value left open at the end of its line only by taking the newline, and every
    line after it up to the next quote, into the value. (No `"` in the data: no search.)"""
    if b'"' not in data:
        return
    for name, column in zip(table.column_names, table.columns, strict=True):
        kind = column.type
        if (pa.types.is_string(kind) or pa.types.is_binary(kind)) and pc.any(
            pc.match_substring(column, "\n")
        ).as_py():
            raise ValueError(f"column {name!r}: a quote is opened and never closed")


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
        return f"expected {count[1]} columns ({_listed(schema.names)}), got {count[2]}"
    return message.removeprefix("CSV parse error: ")


def _listed(names: list[str]) -> str:
    """The first LISTED_NAMES names, and how many more: a message per bad line must not
    repeat a header of 50,000 columns.

        >>> _listed(["id", "a"]), _listed([f"c{i}" for i in range(25)])[-19:]
        ('id, a', 'c18, c19 and 5 more')
    """
    shown = ", ".join(names[:LISTED_NAMES])
    return (
        shown if len(names) <= LISTED_NAMES else f"{shown} and {len(names) - LISTED_NAMES:,} more"
    )
