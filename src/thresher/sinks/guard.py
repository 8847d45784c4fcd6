"""A sink never holds the job store or the job's own input, `force` or not.

A sink's overwrite replaces what its folder holds (`publish.py`), and `sink.force` lets it
do so in a folder thresher did not write. Neither may ever reach the live job store (a
sink at the store's folder once deleted the store and reported success) or the files the
job reads. Each place a sink writes (`WritesPaths.written_paths`: a file sink's folder, a
SQL sink's side folder and SQLite file) is judged by its real path: it must not be, or
hold, the store's file or any of the job's input files. A sink inside the store's folder
is fine (the service writes `outputs/<job>/` beside its store).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import urlparse

from thresher.errors import SpecError
from thresher.sinks.base import Sink, WritesPaths

__all__ = ["check_sink_place"]


def check_sink_place(sink: Sink, store_url: str, inputs: Iterable[str]) -> None:
    """SpecError naming `sink.uri` when a place `sink` writes is or holds the store at
    `store_url` or one of `inputs` (the plan's input paths or URLs). A sink that cannot
    say where it writes (a third party's without `written_paths`) is not checked."""
    if not isinstance(sink, WritesPaths):
        return
    store = _store_file(store_url)
    sources = [p for p in map(_place, set(inputs)) if p is not None]
    problems = []
    for written in sink.written_paths():
        place = _place(written)
        if place is None:
            continue
        if store is not None and _within(store, place):
            problems.append(
                f"sink.uri: {written} holds the job store ({store}), which overwrite or force "
                "would delete; name another folder"
            )
        held = next((s for s in sources if _within(s, place)), None)
        if held is not None:
            problems.append(
                f"sink.uri: {written} holds the job's source file {held}, which overwrite or "
                "force would delete; name another folder"
            )
    if problems:
        raise SpecError(problems)


def _store_file(url: str) -> str | None:
    parsed = urlparse(url)
    return os.path.realpath(parsed.path) if parsed.scheme == "sqlite" and parsed.path else None


def _place(uri: str) -> str | None:
    """A local path as its real path, a URL as itself; None for what is neither (a SQL
    source's shard is a range of rows, not a file)."""
    if "://" in uri and not uri.startswith("file://"):
        return uri.rstrip("/")
    path = uri.removeprefix("file://")
    return os.path.realpath(path) if os.path.isabs(path) else None


def _within(path: str, place: str) -> bool:
    return path == place or path.startswith(place.rstrip("/") + "/")
