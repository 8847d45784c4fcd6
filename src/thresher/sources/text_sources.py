"""The `csv` and `jsonl` source plug-ins: a TextSource with the format's parser."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from thresher.sources.base import InputOptions
from thresher.sources.csv import CsvFormat
from thresher.sources.jsonl import JsonlFormat
from thresher.sources.text import TextSource
from thresher.spec import SourceSection


def csv_source(section: SourceSection, keep_columns: Sequence[str], min_shards: int) -> TextSource:
    """The `csv` source plug-in."""
    fmt = CsvFormat(delimiter=section.csv_delimiter)
    return text_source(section, keep_columns, min_shards, fmt)


def jsonl_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> TextSource:
    """The `jsonl` source plug-in."""
    return text_source(section, keep_columns, min_shards, JsonlFormat())


def text_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int, text_format: Any
) -> TextSource:
    """A CSV or JSONL source of a `[source]` section. `keep_columns` are not model inputs,
    so they are not read as numbers."""
    not_inputs = {section.id_column, *keep_columns} - {None}
    return TextSource(
        uri=section.uri,
        format=text_format,
        shard_bytes=section.shard_bytes,
        features=tuple(section.columns) if section.columns else None,
        not_features=frozenset(c for c in not_inputs if c),
        min_shards=min_shards,
        roots=tuple(section.allowed_roots),
        id_column=section.id_column,
        max_columns=InputOptions.model_validate(section.options).max_columns,
        files=tuple(section.files),
    )
