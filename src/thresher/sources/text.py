"""Line-oriented input (CSV, JSONL): shards are byte ranges aligned to line starts.

Planning seeks to each boundary and reads forward to the next newline, so it touches a few
bytes per shard, never the whole file. Reading parses whole blocks with Arrow; a block that
fails is split in halves until each bad line stands alone, so one bad record costs a few
re-parses and never the rest of its block.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from typing import Literal, Protocol, TypeVar

import numpy as np
import pyarrow as pa

from thresher.errors import SourceError
from thresher.records import BadRecord
from thresher.sources import lines
from thresher.sources.base import MAX_COLUMNS, Chunk, Plan, Shard, check_width, shard_size
from thresher.sources.files import file_size, list_files
from thresher.sources.text_types import most_common_types, typed_schema

SAMPLE_BYTES = 1 << 20
INFER_LINES = 10_000
T = TypeVar("T")
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

    @property
    def has_header(self) -> bool:
        """Whether a file's first line names the columns (CSV)."""
        ...

    def header(self, first_line: bytes) -> list[str]:
        """The column names a header line (without its line end) holds; ValueError if
        it cannot be read."""
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
    id_column: str | None = None  # never read as a float (see text_types)
    max_columns: int = MAX_COLUMNS
    files: tuple[str, ...] = ()  # exactly these files instead of what `uri` lists

    def plan(self) -> Plan:
        urls = list_files(self.uri, self.format.suffixes, self.roots, self.files)
        url, names, sample = self._sniff(urls)
        inferred = self._infer(sample, names)
        check_width(url, len(inferred), self.max_columns)
        inputs = self.features or [n for n in inferred.names if n not in self.not_features]
        parse_sample = partial(self._parse_sample, sample)
        schema = typed_schema(inferred, inputs, self.id_column, self.format.untyped, parse_sample)
        sizes = {u: file_size(u) for u in urls if not u.lower().endswith(lines.COMPRESSED)}
        size = shard_size(sum(sizes.values()), self.shard_bytes, self.min_shards, MIN_SPLIT_BYTES)
        shards: list[Shard] = []
        for file_url in urls:
            shards.extend(self._split(file_url, names, sizes.get(file_url), size, len(shards)))
        return Plan(shards=shards, schema=schema)

    def reader(self, schema: pa.Schema, columns: list[str]) -> TextReader:
        return TextReader(format=self.format, schema=schema, columns=tuple(columns))

    def _sniff(self, urls: list[str]) -> tuple[str, list[str] | None, bytes]:
        """The header and a sample of complete lines of the first file holding a record
        (an empty file, or a CSV of a header alone, holds none)."""
        for url in urls:
            names, sample = self._sample(url)
            if sample.strip():
                return url, names, sample
        where = urls[0] if len(urls) == 1 else f"none of the {len(urls)} files of {self.uri}"
        raise SourceError(f"{where}: no records to infer the columns from")

    def _sample(self, url: str) -> tuple[list[str] | None, bytes]:
        """`url`'s header and about SAMPLE_BYTES of its first complete lines, however
        long the first record is (one longer than MAX_RECORD_BYTES is left out)."""
        with lines.open_text(url) as f:
            found = lines.lines_of(f, SAMPLE_BYTES)
            names = self._header(url, _first(url, found)) if self.format.has_header else None
            sample: list[bytes] = []
            size = 0
            for line in found:
                if isinstance(line, bytes):
                    sample.append(line)
                    size += len(line)
                if size >= SAMPLE_BYTES:
                    break
        return names, b"".join(sample)

    def _header(self, url: str, line: bytes) -> list[str]:
        """The column names of `url`'s header line: distinct, and not too many."""
        try:
            names = self.format.header(line.rstrip(b"\r\n"))
        except ValueError as exc:
            raise SourceError(f"{url} line 1: cannot read the header: {exc}") from exc
        check_width(url, len(names), self.max_columns)
        twice = sorted(name for name, count in Counter(names).items() if count > 1)
        if twice:
            listed = ", ".join(repr(name) for name in twice[:20])
            more = f" and {len(twice) - 20:,} more" if len(twice) > 20 else ""
            raise SourceError(f"{url} line 1: duplicate column names {listed}{more}")
        return names

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
            return most_common_types(schemas)

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
        """Byte ranges of `url` (`size` bytes; None: compressed, one shard); none for an
        empty file."""
        start = 0
        with lines.open_text(url) as f:
            if names is not None:
                header = _first(url, lines.lines_of(f, 64 * 1024))
                if not header:
                    return []  # an empty file
                if self._header(url, header) != names:
                    raise SourceError(f"{url} line 1: header differs from the first file's")
                start = len(header)
            if size is None:
                return [Shard(first_index, url, start, -1)]  # no seeking inside a stream
            bounds = lines.line_bounds(f, start, size, shard_bytes)
        return [
            Shard(first_index + i, url, lo, hi)
            for i, (lo, hi) in enumerate(pairwise(bounds))
            if hi > lo
        ]


@dataclass
class TextReader:
    format: TextFormat
    schema: pa.Schema
    columns: tuple[str, ...]
    _line_cache: dict[tuple[str, int], int] = field(default_factory=dict, repr=False)

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        line_offset = 0
        with lines.open_text(shard.path) as f:
            f.seek(shard.start)
            size = shard.stop - shard.start if shard.stop >= 0 else -1
            for block in lines.blocks(f, size):
                if isinstance(block, lines.TooLong):
                    yield self._too_long(shard, line_offset, block)
                    line_offset += 1
                    continue
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
            count = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
            if table.num_rows == count:
                positions = np.arange(line_offset, line_offset + count, dtype=np.int64)
                return table.select(list(self.columns)), positions, []
        except (pa.ArrowException, ValueError):
            pass
        return self._parse_lines(shard, block, line_offset)

    def _parse_lines(
        self, shard: Shard, block: bytes, line_offset: int
    ) -> tuple[pa.Table, np.ndarray, list[BadRecord]]:
        """The slow path: parse halves of the block until each bad line stands alone."""
        split = block.split(b"\n")
        if split and split[-1] == b"":
            split.pop()
        tables: list[pa.Table] = []
        good: list[int] = []
        bad: list[BadRecord] = []

        # Halves on a stack, first half on top, so tables come out in line order. (Not a
        # recursive closure: that is a reference cycle, and held the parsed tables until
        # Python's next full collection.)
        pending = [[(i, ln) for i, ln in enumerate(split) if ln.strip()]]  # no blank lines
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

    def _too_long(self, shard: Shard, position: int, line: lines.TooLong) -> Chunk:
        """A chunk of no rows and one bad record: a line too long to hold."""
        bad = BadRecord(
            source=shard.path,
            stage="decode",
            error="RecordTooLong",
            message=line.message,
            raw=line.head.decode("utf-8", errors="backslashreplace"),
            line=self._first_line(shard) + position,
        )
        empty = self.schema.empty_table().select(list(self.columns))
        return Chunk(table=empty, positions=np.empty(0, dtype=np.int64), bad=[bad])

    def _first_line(self, shard: Shard) -> int:
        """1-based line number of the shard's first line, counted only when first needed."""
        key = (shard.path, shard.start)
        if key not in self._line_cache:
            self._line_cache[key] = lines.count_newlines(shard.path, shard.start) + 1
        return self._line_cache[key]


def _first(url: str, found: Iterator[bytes | lines.TooLong]) -> bytes:
    """The first of a file's lines, with its line end; b"" for an empty file."""
    line = next(found, b"")
    if isinstance(line, lines.TooLong):
        raise SourceError(f"{url} line 1: a header longer than {lines.MAX_RECORD_BYTES:,} bytes")
    return line


def _line_by_line(sample: bytes, attempt: Callable[[bytes], T]) -> list[tuple[bytes, T]]:
    """`attempt` on each of the sample's first lines alone (with its newline); the lines
    it succeeds on, with what it returned. The slow path when a whole sample will not do."""
    done = []
    for line in sample.split(b"\n")[:INFER_LINES]:
        if not line.strip():
            continue
        try:
            done.append((line, attempt(line + b"\n")))
        except (pa.ArrowException, ValueError):
            continue
    return done
