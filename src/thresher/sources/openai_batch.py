"""An OpenAI batch input file as a job's input: `source.format = "openai-batch"`.

Each request line becomes the job's rows as the service makes them (`openai.lines`): one
row per input of an `/v1/embeddings` request (answered together), one per chat or
completion request, each with its `custom_id`, 1-based `line`, `index` within the
request and `model`. A line that does not pass OpenAI's checks (not JSON, a missing or
repeated custom_id, a method other than POST, a url other than the batch's endpoint,
another model than the file's, no input, `stream: true`, a value of the wrong type) is
not a reason to stop: it is a bad record of its own, with its line, OpenAI's code as its
`error` and its custom_id when it has one, and the other lines run.

Whether a custom_id repeats, and which model is the file's (the first line's that names
one), needs the whole file: planning reads it once, checking every line as a reader
will, and freezes what it found in the plan (the schema's metadata) with each shard's
first line and row count. Shards are byte ranges that start at a line, as for JSONL.
A row's position is `line * MAX_INPUTS + index`: distinct, rising through the file, and
its line is `position // MAX_INPUTS`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from thresher.errors import SourceError
from thresher.openai.lines import MAX_INPUTS, KnownRepeats, LineCheck, LineProblem, SeenIds
from thresher.openai.settings import EMBEDDINGS, KEPT
from thresher.records import BadRecord, cut_raw
from thresher.sources import lines
from thresher.sources.base import Chunk, Plan, Shard, shard_size
from thresher.sources.files import file_size, list_files
from thresher.spec import SourceSection
from thresher.texts import first_unencodable

__all__ = ["BatchFileReader", "BatchFileSource", "openai_batch_source"]

METADATA = b"thresher.openai_batch"
MIN_SPLIT_BYTES = 256 * 1024  # a request costs a model call: smaller shards than JSONL's
TYPES = {
    "custom_id": pa.string(),
    "line": pa.int64(),
    "index": pa.int64(),
    "model": pa.string(),
    "encoding_format": pa.string(),
    "dimensions": pa.int64(),
    "input": pa.string(),
    "messages": pa.string(),
    "prompt": pa.string(),
    "params": pa.string(),
}
INPUTS = {
    EMBEDDINGS: ("input",),
    "/v1/chat/completions": ("messages", "params"),
    "/v1/completions": ("prompt", "params"),
}


def openai_batch_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> BatchFileSource:
    """The `openai-batch` source plug-in (its endpoint filled in by the spec)."""
    return BatchFileSource(
        uri=section.uri,
        endpoint=str(section.options.get("endpoint") or EMBEDDINGS),
        shard_bytes=section.shard_bytes,
        min_shards=min_shards,
        roots=tuple(section.allowed_roots),
    )


def row_schema(endpoint: str) -> pa.Schema:
    """The job's rows for a batch of `endpoint`: the id, what each answer keeps, inputs."""
    names = ("custom_id", *KEPT[endpoint], *INPUTS[endpoint])
    return pa.schema([(name, TYPES[name]) for name in names])


@dataclass(frozen=True)
class BatchFileSource:
    uri: str
    endpoint: str
    shard_bytes: int
    min_shards: int = 1
    roots: tuple[str, ...] = ()

    def plan(self) -> Plan:
        """Shards of the one batch file, each with its first line and row count; the
        file's model and repeated custom_ids in the schema's metadata."""
        urls = list_files(self.uri, (".jsonl",), self.roots)
        if len(urls) != 1:
            raise SourceError(
                f"source.uri: {self.uri} names {len(urls)} files; name one batch file"
            )
        url = urls[0]
        check, tally = LineCheck(self.endpoint, SeenIds()), _Tally()
        shards: list[Shard] = []
        offset = 0  # lines before the shard
        for lo, hi in self._ranges(url):
            shard = Shard(len(shards), url, lo, hi, first_row=offset)
            rows, count = _survey(shard, check, tally)
            shards.append(replace(shard, rows=rows))
            offset += count
        tally.refuse(url, self.endpoint)
        assert isinstance(check.ids, SeenIds)
        facts = {"endpoint": self.endpoint, "model": check.model, "repeats": check.ids.repeats}
        schema = row_schema(self.endpoint).with_metadata({METADATA: json.dumps(facts)})
        return Plan(shards=shards, schema=schema)

    def _ranges(self, url: str) -> list[tuple[int, int]]:
        """Byte ranges of about the shard size, each starting a line (one for a
        compressed file: no seeking inside a stream)."""
        if url.lower().endswith(lines.COMPRESSED):
            return [(0, -1)]
        size = file_size(url)
        per_shard = shard_size(size, self.shard_bytes, self.min_shards, MIN_SPLIT_BYTES)
        with lines.open_text(url) as f:
            bounds = lines.line_bounds(f, 0, size, per_shard)
        return [(lo, hi) for lo, hi in pairwise(bounds) if hi > lo]

    def reader(self, schema: pa.Schema, columns: list[str]) -> BatchFileReader:
        facts = json.loads((schema.metadata or {})[METADATA])
        return BatchFileReader(
            endpoint=facts["endpoint"],
            model=facts["model"],
            repeats=frozenset(facts["repeats"]),
            columns=tuple(columns),
        )


@dataclass(frozen=True)
class BatchFileReader:
    """Reads a shard's request lines into rows, each bad line a bad record."""

    endpoint: str
    model: str | None
    repeats: frozenset[int]
    columns: tuple[str, ...]

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        check = LineCheck(self.endpoint, KnownRepeats(self.repeats), self.model)
        rows: list[dict[str, Any]] = []
        bad: list[BadRecord] = []
        for number, raw in _numbered(shard):
            found, problems = _check_line(check, raw, number)
            if problems:
                bad.append(_bad_line(shard.path, number, raw, problems))
            rows += found
            if len(rows) >= rows_per_chunk or len(bad) >= rows_per_chunk:
                yield from self._chunks(rows, bad, rows_per_chunk)
                rows, bad = [], []
        if rows or bad:
            yield from self._chunks(rows, bad, rows_per_chunk)

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        return "line", position // MAX_INPUTS

    def input_index(self, position: int) -> int:
        return position % MAX_INPUTS

    def _chunks(
        self, rows: list[dict[str, Any]], bad: list[BadRecord], rows_per_chunk: int
    ) -> Iterator[Chunk]:
        """`rows` in chunks of at most `rows_per_chunk`, the bad records with the first."""
        table = pa.Table.from_pylist(rows, schema=row_schema(self.endpoint))
        table = table.select(list(self.columns))
        positions = np.array(
            [row["line"] * MAX_INPUTS + row["index"] for row in rows], dtype=np.int64
        )
        for lo in range(0, max(len(rows), 1), rows_per_chunk):
            yield Chunk(
                table=table.slice(lo, rows_per_chunk),
                positions=positions[lo : lo + rows_per_chunk],
                bad=bad if lo == 0 else [],
            )


@dataclass
class _Tally:
    """What planning counts: request lines, and those asking for another endpoint."""

    requests: int = 0
    other_endpoint: int = 0
    first_other: str = ""

    def add(self, problems: list[LineProblem]) -> None:
        self.requests += 1
        wrong = [p for p in problems if p.code == "mismatched_endpoint"]
        if wrong:
            self.other_endpoint += 1
            self.first_other = self.first_other or f"line {wrong[0].line}: {wrong[0].message}"

    def refuse(self, url: str, endpoint: str) -> None:
        """SourceError for a file with no request, or none for the batch's endpoint (a
        spec that names the wrong one, not a file of bad lines)."""
        if self.requests == 0:
            raise SourceError(f"{url}: the file has no request lines")
        if self.other_endpoint == self.requests:
            raise SourceError(
                f"{url}: no line asks for the batch's endpoint {endpoint} ({self.first_other});"
                " set source.options.endpoint to the file's"
            )


def _survey(shard: Shard, check: LineCheck, tally: _Tally) -> tuple[int, int]:
    """Check a shard's lines as a reader will (`check` carries what earlier shards
    showed); its rows (a bad line is one) and its lines."""
    rows = count = 0
    for number, raw in _numbered(shard, blank=True):
        count = number - shard.first_row
        if isinstance(raw, bytes) and not raw.strip():
            continue
        found, problems = _check_line(check, raw, number)
        tally.add(problems)
        rows += len(found) or 1
    return rows, count


def _numbered(shard: Shard, blank: bool = False) -> Iterator[tuple[int, bytes | lines.TooLong]]:
    """The shard's lines with their 1-based numbers in the file (blank ones only if
    `blank`), each without its line end."""
    size = shard.stop - shard.start if shard.stop >= 0 else -1
    number = shard.first_row
    with lines.open_text(shard.path) as f:
        f.seek(shard.start)
        for block in lines.blocks(f, size):
            pieces = [block] if isinstance(block, lines.TooLong) else block.split(b"\n")
            if isinstance(block, bytes) and block.endswith(b"\n"):
                pieces.pop()  # after the last newline: nothing
            for piece in pieces:
                number += 1
                if blank or not isinstance(piece, bytes) or piece.strip():
                    yield number, piece


def _check_line(
    check: LineCheck, raw: bytes | lines.TooLong, number: int
) -> tuple[list[dict[str, Any]], list[LineProblem]]:
    """A line's rows (with the file's model), or its problems: OpenAI's checks, text
    that UTF-8 cannot hold (a lone surrogate: JSON allows `\\ud800`) among them."""
    if isinstance(raw, lines.TooLong):
        return [], [LineProblem("line_too_long", raw.message, number)]
    found, problems = check.check(raw, number)
    return [{**row, "model": check.model} for row in found], problems


def _bad_line(
    source: str, number: int, raw: bytes | lines.TooLong, problems: list[LineProblem]
) -> BadRecord:
    """A bad line's record: OpenAI's code of its first problem, every problem's message,
    and its custom_id when it has one."""
    text = raw.head if isinstance(raw, lines.TooLong) else raw.removesuffix(b"\r")
    return BadRecord(
        source=source,
        stage="decode",
        error=problems[0].code,
        message="; ".join(p.message for p in problems),
        raw=cut_raw(text),
        line=number,
        id=_custom_id(text),
    )


def _custom_id(raw: bytes) -> str | None:
    try:
        line = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    custom_id = line.get("custom_id") if isinstance(line, dict) else None
    return (
        custom_id if isinstance(custom_id, str) and first_unencodable(custom_id) is None else None
    )
