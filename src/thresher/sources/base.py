"""The source contract: plan input into shards once, then read any shard anywhere.

A shard is a small, picklable description of a slice of input (a file and a range of row
groups or bytes). Planning never reads the data itself, only metadata and a few bytes
around each boundary; reading a shard streams it in bounded chunks.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
from pydantic import Field

from thresher.errors import SourceError
from thresher.plugins import Options
from thresher.records import BadRecord

if TYPE_CHECKING:
    from thresher.spec import SourceSection

# A plan's schema metadata: what the source says it reads, beyond its shards (JSON; a
# table trigger's job, whether it reads only what some versions added): the manifest's
# `source_read`.
READ_KEY = b"thresher.source_read"
MIN_SPLIT_ROWS = 4_096  # rows cut off for a worker of their own, at least
# Columns one input may have unless its spec says more: planning and reading cost grows
# with the width (Arrow's CSV reader alone spends a good part of a millisecond on each
# column of each block), and a file of a million one-byte columns is more likely an
# attack or a mistake than a table.
MAX_COLUMNS = 10_000


class InputOptions(Options):
    """`source.options` of the file sources (`csv`, `jsonl`, `parquet`)."""

    max_columns: int = Field(default=MAX_COLUMNS, ge=1)


def file_source_fields(section: SourceSection, min_shards: int) -> dict[str, Any]:
    """What a source of whole files (`parquet`, `arrow`) is made of, from its section."""
    return {
        "uri": section.uri,
        "shard_bytes": section.shard_bytes,
        "min_shards": min_shards,
        "roots": tuple(section.allowed_roots),
        "max_columns": InputOptions.model_validate(section.options).max_columns,
        "files": tuple(section.files),
    }


def check_width(url: str, columns: int, limit: int) -> None:
    """Refuse an input wider than `limit` columns, naming the file and the count."""
    if columns > limit:
        raise SourceError(
            f"{url}: {columns:,} columns, more than the {limit:,} an input may have;"
            " raise source.options.max_columns to read it"
        )


@dataclass(frozen=True)
class Shard:
    """A slice of one input file: row groups [start, stop) for Parquet, bytes for text.

    `index` is the shard's place in input order; outputs are named by it.
    """

    index: int
    path: str
    start: int
    stop: int
    # Parquet: the file row number of the shard's first row, and how many rows it holds
    # (text formats know neither until they read).
    first_row: int = 0
    rows: int | None = None


@dataclass
class Chunk:
    """Rows read from a shard: the good ones as a table, the bad ones as records.

    `positions` locate each good row for error reports: the file row for Parquet, the
    0-based line offset from the shard's start for text (see ShardReader.locate).
    """

    table: pa.Table
    positions: np.ndarray
    bad: list[BadRecord] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    """The frozen result of planning: the shards and the schema every shard is read with.

    A plan is stored with its job (`to_json`) so that resume never plans again: the same
    shard index always means the same slice of input.
    """

    shards: list[Shard]
    schema: pa.Schema

    def read_note(self) -> dict[str, Any] | None:
        """What the source said it reads (`READ_KEY`), for the manifest; None: nothing."""
        note = (self.schema.metadata or {}).get(READ_KEY)
        return None if note is None else dict(json.loads(note))

    def to_json(self) -> dict[str, Any]:
        return {
            "shards": [asdict(s) for s in self.shards],
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii"),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(data["schema"])))
        return cls(shards=[Shard(**s) for s in data["shards"]], schema=schema)


def shard_size(total: int, largest: int, min_shards: int, smallest: int) -> int:
    """How much input (rows or bytes) each shard takes: at most `largest` (the spec's
    shard size), and little enough that the input makes `min_shards` even shards, so a
    small job of an expensive model (20,000 sentences: one 3 MB shard) still keeps a
    worker on every core; but none under `smallest`, where a shard costs more to run than
    it saves.

        >>> shard_size(20_000, 10**6, 2, 4_096), shard_size(10_000, 10**6, 4, 4_096)
        (10000, 5000)
    """
    pieces = max(1, min(min_shards, total // smallest))
    return max(1, min(largest, -(-total // pieces)))


class ShardReader(Protocol):
    """Reads shards in a worker. Picklable: it travels to worker processes and Ray actors."""

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        """Stream the shard's rows, at most `rows_per_chunk` good rows per chunk."""
        ...

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        """Turn a chunk position into what a person looks up: (`line`, 1-based) or
        (`row`, 0-based within the file)."""
        ...


@runtime_checkable
class ManyRowsPerLine(Protocol):
    """A reader whose line may hold several rows (an OpenAI embeddings request's list of
    inputs), so a line alone does not name a row: `locate` gives the line, this the
    row's place in it. Bad records carry both, and `retry-errors` picks rows by both."""

    def input_index(self, position: int) -> int:
        """The 0-based place, among its line's rows, of the row at a chunk position."""
        ...


@runtime_checkable
class Published(Protocol):
    """A source with something to do once its job's output is published, and before the
    job is recorded as succeeded (a Kafka source commits its group's offsets). A crash
    before it ends leaves the job to resume, which publishes again and calls it again:
    it must be idempotent."""

    def published(self, plan: Plan) -> None:
        """Act on the published job of `plan`."""
        ...


class Source(Protocol):
    """A planned input: where the rows are and how to read them."""

    def plan(self) -> Plan:
        """Split the input into shards, deterministically, reading metadata only."""
        ...

    def reader(self, schema: pa.Schema, columns: list[str]) -> ShardReader:
        """A reader of just `columns`, in that order, for any shard of a plan whose
        schema is `schema`."""
        ...
