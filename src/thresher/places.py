"""The places a spec names: which format a uri implies (a file's suffix, a database's
scheme), inputs relative to the spec's folder, and outputs that must be a folder, never
nothing or a whole filesystem.

A sink's overwrite replaces what its folder holds; an empty path would be the working
directory and a root the machine's, so the spec refuses both (`sink.uri`,
`sink.staging`) before anything is touched. Which folders are thresher's to replace is
the sink's question (`sinks/publish.written_by_thresher`); which may never be a sink's
(the job store, the job's input) is the guard's (`sinks/guard.py`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = [
    "FILE_FORMATS",
    "QUERY_FORMATS",
    "check_output_place",
    "infer_format",
    "resolve_option_uris",
    "resolve_uri",
    "table_format",
]

FILE_FORMATS: tuple[str, ...] = ("parquet", "csv", "jsonl", "arrow")
SUFFIX_FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
}
# The SQL sources and sinks, which a uri's scheme names, and the uri each reads (a sink's
# adds `?table=name`).
QUERY_FORMATS = {
    "postgresql": "postgresql://user@host:port/db",
    "sqlite": "sqlite:///path/file.db",
    "duckdb": "duckdb:///path/file.duckdb",
}
# The sinks whose output is not a folder, so they keep staged parts, `_errors/` and
# `_SUCCESS` in a side folder (`sink.staging`) of their own.
SIDE_FOLDER_SINKS = (*QUERY_FORMATS, "kafka")


def table_format(uri: str) -> str | None:
    """The SQL source or sink format a uri's scheme names (`sqlite:///x.db` -> `sqlite`)."""
    scheme = uri.partition("://")[0] if "://" in uri else ""
    return "postgresql" if scheme == "postgres" else scheme if scheme in QUERY_FORMATS else None


def infer_sink_format(uri: str, format: str | None) -> str:
    """The sink format a `[sink]`'s uri and its `format` (None: not given) name: a table
    database's or Kafka's by the uri's scheme, else `format`, else parquet. ValueError
    names the field in the way."""
    by_uri = table_format(uri)
    if by_uri is not None:
        if format not in (None, by_uri):
            raise ValueError(f"format: a {by_uri}:// uri writes a table, not {format}")
        return by_uri
    if uri.startswith("kafka://") and format in (None, "kafka"):
        return "kafka"
    if format in QUERY_FORMATS:
        raise ValueError(f"uri: a {format} sink needs {QUERY_FORMATS[format]}?table=name")
    return format or "parquet"


def infer_format(uri: str) -> str | None:
    """The file format a path's suffix implies (`data/*.csv` -> `csv`), or None."""
    name = uri.rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix in (".gz", ".zst", ".bz2"):
        name = name.removesuffix(suffix)
    return SUFFIX_FORMATS.get(Path(name).suffix)


def check_output_place(uri: str) -> str:
    """`uri`, unless it names no place or a whole filesystem (empty, `/`, `file:///`,
    `s3://`): overwrite replaces what a folder holds, an empty path would be the working
    directory and a root the machine's. ValueError says why."""
    scheme, sep, rest = uri.partition("://")
    if sep and scheme != "file":
        if rest.strip("/"):
            return uri
    elif uri.strip() and os.path.normpath(rest if sep else uri).strip("/"):
        return uri
    raise ValueError(f"names no folder or a filesystem root ({uri!r}); name the output's folder")


def resolve_uri(uri: str, base: Path) -> str:
    """`data/x.parquet` -> `<base>/data/x.parquet`; URLs, absolute paths and modules stay
    (and so does an empty uri: it names nothing, not the spec's folder)."""
    if "://" in uri or not uri.strip():
        for scheme in ("sqlite:///", "duckdb:///"):  # a file beside the spec
            if uri.startswith(scheme) and not uri.startswith(f"{scheme}/"):
                return scheme + os.path.abspath(base / uri[len(scheme) :])
        return uri
    target, colon, attr = uri.rpartition(":") if uri.count(":") == 1 else (uri, "", "")
    if colon and not target.endswith(".py"):
        return uri  # pkg.module:Class
    path = Path(target)
    resolved = str(path) if path.is_absolute() else os.path.abspath(base / path)
    trailing = "/" if uri.endswith("/") and not resolved.endswith("/") else ""
    return f"{resolved}{trailing}{colon}{attr}"


# The keys of a plug-in's options whose values are places: a features source's tables
# name each by `uri`, an Iceberg catalog its database by `uri` and its files' root by
# `warehouse` (pyiceberg's own property names).
PLACE_KEYS = frozenset({"uri", "warehouse"})


def resolve_option_uris(options: dict[str, Any] | list[Any], base: Path) -> None:
    """Resolve, in place, every place key's value (`PLACE_KEYS`, a string) at any depth
    of a plug-in's options, as `resolve_uri` does a section's own: a plug-in that reads
    more than one input names each like a source's `uri`."""
    items = options.items() if isinstance(options, dict) else enumerate(options)
    for key, value in list(items):
        if key in PLACE_KEYS and isinstance(value, str) and isinstance(options, dict):
            options[key] = resolve_uri(value, base)
        elif isinstance(value, dict | list):
            resolve_option_uris(value, base)
