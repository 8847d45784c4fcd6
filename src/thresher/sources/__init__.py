"""Sources: where the rows come from, and how they are split into shards."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from thresher.sources.base import Chunk, Plan, Shard, ShardReader, Source
from thresher.sources.csv import CsvFormat
from thresher.sources.jsonl import JsonlFormat
from thresher.sources.parquet import ParquetSource
from thresher.sources.sql import PostgresSource
from thresher.sources.text import TextSource
from thresher.spec import SourceSection

__all__ = ["Chunk", "Plan", "Shard", "ShardReader", "Source", "feature_columns", "open_source"]


def open_source(
    section: SourceSection, keep_columns: Sequence[str] = (), min_shards: int = 1
) -> Source:
    """The Source a `[source]` section describes. `keep_columns` are not model inputs, so
    a text format does not read them as numbers. `min_shards` (the run's workers) makes
    planning cut an input too small for that many shards of the spec's size finer."""
    if section.format == "parquet":
        return ParquetSource(section.uri, section.shard_bytes, min_shards)
    if section.format == "postgresql":
        key = section.key_column or section.id_column
        assert section.query and key  # the spec requires them
        return PostgresSource(section.uri, section.query, key, section.shard_rows, min_shards)
    text_format = (
        CsvFormat(delimiter=section.csv_delimiter) if section.format == "csv" else JsonlFormat()
    )
    not_inputs = {section.id_column, *keep_columns} - {None}
    return TextSource(
        uri=section.uri,
        format=text_format,
        shard_bytes=section.shard_bytes,
        features=tuple(section.columns) if section.columns else None,
        not_features=frozenset(c for c in not_inputs if c),
        min_shards=min_shards,
    )


def feature_columns(section: SourceSection, schema: pa.Schema, keep: Sequence[str]) -> list[str]:
    """The model's inputs: `source.columns`, or every column but the id, key and keep
    columns."""
    if section.columns:
        return list(section.columns)
    not_inputs = {section.id_column, section.key_column, *keep}
    return [n for n in schema.names if n not in not_inputs]
