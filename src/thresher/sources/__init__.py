"""Sources: where the rows come from, and how they are split into shards."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from thresher.plugins import Kind, find
from thresher.sources.base import Chunk, Plan, Published, Shard, ShardReader, Source
from thresher.spec import SourceSection

__all__ = [
    "Chunk",
    "Plan",
    "Shard",
    "ShardReader",
    "Source",
    "feature_columns",
    "open_source",
    "tell_published",
]


def open_source(
    section: SourceSection, keep_columns: Sequence[str] = (), min_shards: int = 1
) -> Source:
    """The Source a `[source]` section describes, made by the registered source plug-in
    its `format` names (plugins.py). `keep_columns` are not model inputs, so
    a text format does not read them as numbers. `min_shards` (the run's workers) makes
    planning cut an input too small for that many shards of the spec's size finer."""
    assert section.format is not None  # the spec infers it
    factory = find(Kind.SOURCE, section.format).load()
    source: Source = factory(section, keep_columns, min_shards)
    if section.images is not None:  # a column of images, in any source's rows
        from thresher.sources.image_columns import ImageColumnSource, folder_of

        roots = tuple(section.allowed_roots)
        base = folder_of(section)
        return ImageColumnSource(source, section.images, base, roots, section.id_column)
    return source


def feature_columns(section: SourceSection, schema: pa.Schema, keep: Sequence[str]) -> list[str]:
    """The model's inputs: `source.columns`, or every column but the id, key and keep
    columns."""
    if section.columns:
        return list(section.columns)
    not_inputs = {section.id_column, section.key_column, *keep}
    return [n for n in schema.names if n not in not_inputs]


def tell_published(section: SourceSection, keep_columns: Sequence[str], plan: Plan) -> None:
    """After a job published its output (its own finish, or an approve of a held job):
    the source's `Published` hook, for a source that has one (a Kafka group's offsets
    committed). Called before the job is recorded `succeeded`, so a crash leaves it to
    the resume or the approve asked again."""
    source = open_source(section, keep_columns)
    if isinstance(source, Published):
        source.published(plan)
