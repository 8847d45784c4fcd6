"""Line-oriented input (CSV, JSONL): shards are byte ranges aligned to line starts.

Planning seeks to each boundary and reads forward to the next newline, so it touches a few
bytes per shard, never the whole file. Reading parses whole blocks with Arrow; a block that
fails is split in halves until each bad line stands alone, so one bad record costs a few
re-parses and never the rest of its block.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal, Protocol, TypeVar

import fsspec
import numpy as np
import pyarrow as pa

from thresher.errors import SourceError
from thresher.records import BadRecord
from thresher.sources.base import Chunk, Plan, Shard, shard_size
from thresher.sources.files import file_size, list_files

SAMPLE_BYTES = 1 << 20
READ_BLOCK = 4 << 20
INFER_LINES = 10_000
T = TypeVar("T")
COMPRESSED = (".gz", ".bz2", ".zst", ".xz")
MIN_SPLIT_BYTES = 1 << 20  # a byte range smaller than this is not worth a worker of its own


class TextFormat(Protocol):
    """How one line-oriented format is sniffed and parsed."""

    @property
    def suffixes(self) -> tuple[str, ...]:
        """File name endings this format reads from a directory."""
        ...

    @property
    def untyped(self) -> bool:
        """Whether values are bare text (CSV), so a column's type is only ever guessed;
        JSON values carry their own."""
        ...

    def header(self, first_line: bytes) -> list[str] | None:
        """Column names if the format has a header line (CSV), else None."""
        ...

    def infer(self, sample: bytes, names: list[str] | None) -> pa.Schema:
        """The schema of complete lines `sample`."""
        ...

    def parse(self, data: bytes, schema: pa.Schema) -> pa.Table:
        """Parse complete lines into a table of `schema` (for CSV, also the header's
        column order); raise on any bad line."""
        ...


@dataclass(frozen=True)
class TextSource:
    uri: str
    format: TextFormat
    shard_bytes: int
    # Model inputs are read as float64 whatever the sample suggests: a sample that holds
    # only whole numbers (or one bad value) must not decide how later rows parse. With no
    # explicit `features`, every column but `not_features` is a model input.
    features: tuple[str, ...] | None = None
    not_features: frozenset[str] = frozenset()
    min_shards: int = 1  # the workers the run will have: smaller shards to give each one
    roots: tuple[str, ...] = ()  # where every file read must really lie (none: anywhere)

    def plan(self) -> Plan:
        urls = list_files(self.uri, self.format.suffixes, self.roots)
        names, sample = self._sniff(urls[0])
        inferred = self._infer(sample, names)
        inputs = self.features or [n for n in inferred.names if n not in self.not_features]
        # Text columns are judged on their values: parse the sample once for both checks
        # (inputs that may be numbers; in a CSV, other columns that may be integers).
        texts = [f.name for f in inferred if _is_text_type(f.type)]
        judged = self.format.untyped or any(n in inputs for n in texts)
        parsed = self._parse_sample(sample, inferred) if texts and judged else None
        schema = _retyped(
            inferred, _numeric(inferred, inputs, parsed), self._integers(texts, inputs, parsed)
        )
        sizes = {u: file_size(u) for u in urls if not u.lower().endswith(COMPRESSED)}
        size = shard_size(sum(sizes.values()), self.shard_bytes, self.min_shards, MIN_SPLIT_BYTES)
        shards: list[Shard] = []
        for url in urls:
            shards.extend(self._split(url, names, sizes.get(url), size, len(shards)))
        return Plan(shards=shards, schema=schema)

    def reader(self, schema: pa.Schema, columns: list[str]) -> TextReader:
        return TextReader(format=self.format, schema=schema, columns=tuple(columns))

    def _sniff(self, url: str) -> tuple[list[str] | None, bytes]:
        with _open_text(url) as f:
            sample = f.read(SAMPLE_BYTES)
        first, _, rest = sample.partition(b"\n")
        names = self.format.header(first)
        body = rest if names is not None else sample
        if len(sample) >= SAMPLE_BYTES and b"\n" in body:
            body = body[: body.rindex(b"\n") + 1]  # only complete lines
        if not body.strip():
            raise SourceError(f"{url}: no records to infer the columns from")
        return names, body

    def _infer(self, sample: bytes, names: list[str] | None) -> pa.Schema:
        """The sample's schema; bad lines in the sample are left out rather than fatal."""
        try:
            return self.format.infer(sample, names)
        except (pa.ArrowException, ValueError):
            pass
        readable = _line_by_line(sample, lambda line: self.format.infer(line, names))
        good, schemas = [line for line, _ in readable], [schema for _, schema in readable]
        if not good:
            raise SourceError(f"source.uri: no readable record in the first lines of {self.uri}")
        try:
            return self.format.infer(b"\n".join(good) + b"\n", names)
        except (pa.ArrowException, ValueError):
            # Lines that parse alone can still disagree (JSON `1` here, `"high"` there).
            return _most_common_types(schemas)

    def _integers(
        self, texts: Sequence[str], inputs: Sequence[str], parsed: pa.Table | None
    ) -> frozenset[str]:
        """Text columns of a CSV, other than model inputs, whose sample values are whole
        numbers but for a stray one in a hundred (an id column with one `id-10`): read as
        int64, so the stray lines are bad records, as in JSONL, rather than every id of the
        file turning to text."""
        if parsed is None or not self.format.untyped:
            return frozenset()
        others = [n for n in texts if n not in inputs]
        return frozenset(n for n in others if _share_parsed(parsed.column(n), int) >= 0.99)

    def _parse_sample(self, sample: bytes, schema: pa.Schema) -> pa.Table:
        """The sample as a table of `schema`, bad lines left out."""
        try:
            return self.format.parse(sample, schema)
        except (pa.ArrowException, ValueError):
            pass
        tables = [t for _, t in _line_by_line(sample, lambda line: self.format.parse(line, schema))]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def _split(
        self,
        url: str,
        names: list[str] | None,
        size: int | None,
        shard_bytes: int,
        first_index: int,
    ) -> list[Shard]:
        """Byte ranges of `url` (`size` bytes; None: compressed, one shard)."""
        start = 0
        with _open_text(url) as f:
            if names is not None:
                header = f.readline()
                if self.format.header(header.rstrip(b"\r\n")) != names:
                    raise SourceError(f"{url} line 1: header differs from the first file's")
                start = len(header)
            if size is None:
                return [Shard(first_index, url, start, -1)]  # no seeking inside a stream
            bounds = [start]
            while bounds[-1] + shard_bytes < size:
                f.seek(bounds[-1] + shard_bytes)
                f.readline()  # finish the line we landed in
                if f.tell() >= size:
                    break
                bounds.append(f.tell())
        bounds.append(size)
        return [
            Shard(first_index + i, url, lo, hi)
            for i, (lo, hi) in enumerate(pairwise(bounds))
            if hi > lo
        ] or [Shard(first_index, url, start, size)]


@dataclass
class TextReader:
    format: TextFormat
    schema: pa.Schema
    columns: tuple[str, ...]
    _line_cache: dict[tuple[str, int], int] = field(default_factory=dict, repr=False)

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        line_offset = 0
        for block in _blocks(shard):
            table, positions, bad = self._parse_block(shard, block, line_offset)
            line_offset += block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
            for lo in range(0, max(table.num_rows, 1), rows_per_chunk):
                yield Chunk(
                    table=table.slice(lo, rows_per_chunk),
                    positions=positions[lo : lo + rows_per_chunk],
                    bad=bad if lo == 0 else [],
                )

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        return "line", self._first_line(shard) + position

    def _parse_block(
        self, shard: Shard, block: bytes, line_offset: int
    ) -> tuple[pa.Table, np.ndarray, list[BadRecord]]:
        try:
            table = self.format.parse(block, self.schema)
            lines = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
            if table.num_rows == lines:
                positions = np.arange(line_offset, line_offset + lines, dtype=np.int64)
                return table.select(list(self.columns)), positions, []
        except (pa.ArrowException, ValueError):
            pass
        return self._parse_lines(shard, block, line_offset)

    def _parse_lines(
        self, shard: Shard, block: bytes, line_offset: int
    ) -> tuple[pa.Table, np.ndarray, list[BadRecord]]:
        """The slow path: parse halves of the block until each bad line stands alone."""
        lines = block.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        tables: list[pa.Table] = []
        good: list[int] = []
        bad: list[BadRecord] = []

        # Halves on a stack, first half on top, so tables come out in line order. (Not a
        # recursive closure: that is a reference cycle, and held the parsed tables until
        # Python's next full collection.)
        pending = [[(i, ln) for i, ln in enumerate(lines) if ln.strip()]]  # no blank lines
        while pending:
            part = pending.pop()
            if not part:
                continue
            try:
                table = self.format.parse(b"\n".join(ln for _, ln in part) + b"\n", self.schema)
                if table.num_rows != len(part):
                    raise ValueError(f"expected {len(part)} records, parsed {table.num_rows}")
            except (pa.ArrowException, ValueError) as exc:
                if len(part) == 1:
                    bad.append(self._bad_line(shard, line_offset + part[0][0], part[0][1], exc))
                else:
                    half = len(part) // 2
                    pending += [part[half:], part[:half]]
                continue
            tables.append(table)
            good.extend(i for i, _ in part)
        table = pa.concat_tables(tables) if tables else self.schema.empty_table()
        positions = np.asarray(good, dtype=np.int64) + line_offset
        return table.select(list(self.columns)), positions, bad

    def _bad_line(self, shard: Shard, position: int, raw: bytes, exc: Exception) -> BadRecord:
        raw = raw.removesuffix(b"\r")  # the line without its CRLF ending
        try:
            raw.decode("utf-8")
            error, message = type(exc).__name__, str(exc).strip()
        except UnicodeDecodeError as decode_error:
            error, message = "UnicodeDecodeError", f"invalid UTF-8: {decode_error.reason}"
        return BadRecord(
            source=shard.path,
            stage="decode",
            error=error,
            message=message.splitlines()[0] if message else error,
            raw=raw.decode("utf-8", errors="backslashreplace"),
            line=self._first_line(shard) + position,
        )

    def _first_line(self, shard: Shard) -> int:
        """1-based line number of the shard's first line, counted only when first needed."""
        key = (shard.path, shard.start)
        if key not in self._line_cache:
            newlines = 0
            with _open_text(shard.path) as f:
                remaining = shard.start
                while remaining > 0:
                    data = f.read(min(READ_BLOCK, remaining))
                    if not data:
                        break
                    newlines += data.count(b"\n")
                    remaining -= len(data)
            self._line_cache[key] = newlines + 1
        return self._line_cache[key]


def _blocks(shard: Shard) -> Iterator[bytes]:
    """The shard's bytes in blocks of whole lines, about READ_BLOCK each."""
    with _open_text(shard.path) as f:
        f.seek(shard.start)
        remaining = shard.stop - shard.start if shard.stop >= 0 else -1
        carry = b""
        while remaining != 0:
            want = READ_BLOCK if remaining < 0 else min(READ_BLOCK, remaining)
            data = f.read(want)
            if not data:
                break
            if remaining > 0:
                remaining -= len(data)
            data = carry + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data
                continue
            carry = data[cut:]
            yield data[:cut]
        if carry:
            yield carry


def _open_text(url: str) -> Any:
    """A binary file, decompressed on the fly when its name says it is compressed."""
    compression = "infer" if url.lower().endswith(COMPRESSED) else None
    return fsspec.open(url, "rb", compression=compression)


def _most_common_types(schemas: list[pa.Schema]) -> pa.Schema:
    """Each column's most frequent type over per-line schemas (null only if always null);
    the lines of the other types then become bad records."""
    votes: dict[str, Counter[pa.DataType]] = {}
    for schema in schemas:
        for column in schema:
            counts = votes.setdefault(column.name, Counter())
            counts[column.type] += 0 if pa.types.is_null(column.type) else 1
    return pa.schema([(name, counts.most_common(1)[0][0]) for name, counts in votes.items()])


def _line_by_line(sample: bytes, attempt: Callable[[bytes], T]) -> list[tuple[bytes, T]]:
    """`attempt` on each of the sample's first lines alone (with its newline); the lines
    it succeeds on, with what it returned. The slow path when a whole sample will not do."""
    done = []
    for line in sample.splitlines()[:INFER_LINES]:
        try:
            done.append((line, attempt(line + b"\n")))
        except (pa.ArrowException, ValueError):
            continue
    return done


def _is_number_type(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind))


def _is_text_type(kind: pa.DataType) -> bool:
    # Arrow infers bytes for a CSV column holding invalid UTF-8: text, with a bad line in it.
    return bool(pa.types.is_string(kind) or pa.types.is_binary(kind))


def _numeric(schema: pa.Schema, inputs: Sequence[str], parsed: pa.Table | None) -> frozenset[str]:
    """Model inputs to read as float64: those the sample shows as numbers, and text
    ones whose sample values are mostly numbers (a stray "n/a" must not turn a
    numeric column into text). Real text columns (for text models) stay text."""
    numeric = {n for n in inputs if n in schema.names and _is_number_type(schema.field(n).type)}
    texts = [n for n in inputs if n in schema.names and _is_text_type(schema.field(n).type)]
    if parsed is not None:
        numeric |= {n for n in texts if _share_parsed(parsed.column(n), float) >= 0.5}
    return frozenset(numeric)


def _share_parsed(column: pa.ChunkedArray, parse: Callable[[str], Any]) -> float:
    """The share of a text column's non-empty values that `parse` (float, int) accepts;
    0 for a column with none."""
    values = [v for v in column.to_pylist() if v not in (None, "")]
    parsed = 0
    for value in values:
        try:
            parse(value)
            parsed += 1
        except ValueError:
            continue
    return parsed / len(values) if values else 0.0


def _retyped(
    schema: pa.Schema, float_columns: frozenset[str], int_columns: frozenset[str]
) -> pa.Schema:
    """Model inputs as float64, whole-number columns as int64; bytes as text (Arrow
    infers bytes only from invalid UTF-8, which must then be a bad record, not a column
    type)."""
    fields = []
    for column in schema:
        if column.name in float_columns:
            fields.append(column.with_type(pa.float64()))
        elif column.name in int_columns:
            fields.append(column.with_type(pa.int64()))
        elif pa.types.is_binary(column.type) or pa.types.is_null(column.type):
            fields.append(column.with_type(pa.string()))
        else:
            fields.append(column)
    return pa.schema(fields)
