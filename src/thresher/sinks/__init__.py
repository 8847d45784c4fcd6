"""Sinks: where predictions go, each part committed exactly once."""

from __future__ import annotations

from thresher.plugins import Kind, find
from thresher.sinks.base import PartTarget, PartWriter, Sink
from thresher.sinks.parts import PartLayout, StagedPart
from thresher.spec import SinkSection

__all__ = ["PartLayout", "PartTarget", "PartWriter", "Sink", "StagedPart", "open_sink"]


def open_sink(section: SinkSection) -> Sink:
    """The Sink a `[sink]` section describes, made by the registered sink plug-in its
    `format` names (plugins.py)."""
    assert section.format is not None  # the spec infers it
    sink: Sink = find(Kind.SINK, section.format).load()(section)
    return sink
