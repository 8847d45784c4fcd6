"""Sinks: where predictions go, each part committed exactly once."""

from __future__ import annotations

from thresher.sinks.base import PartTarget, PartWriter, Sink
from thresher.sinks.files import FileSink
from thresher.sinks.parts import PartLayout, StagedPart
from thresher.sinks.postgresql import postgresql_sink
from thresher.sinks.sqlite import sqlite_sink
from thresher.spec import SinkSection

__all__ = ["PartLayout", "PartTarget", "PartWriter", "Sink", "StagedPart", "open_sink"]


def open_sink(section: SinkSection) -> Sink:
    """The Sink a `[sink]` section describes."""
    if section.format == "sqlite":
        return sqlite_sink(section)
    if section.format == "postgresql":
        return postgresql_sink(section)
    assert section.format is not None  # the spec infers it
    return FileSink(
        uri=section.uri, file_format=section.format, mode=section.mode, force=section.force
    )
