"""A reference file (the training data) profiled as a job's inputs would be — once: the
profile is kept in the store under `file:<uri>@<version>`, where the version is each
file's size and mtime (an object's ETag), so a changed file is profiled again and an
unchanged one never is."""

from __future__ import annotations

import hashlib
import os

import pyarrow as pa
from pydantic import ValidationError

from thresher.errors import SourceError, describe_errors
from thresher.profiles.profile import Profile, merge_profiles
from thresher.profiles.profiler import ShardProfiler
from thresher.profiles.sampling import sample_rate_for
from thresher.profiles.settings import MonitorSection
from thresher.sources import Plan, Source, open_source
from thresher.sources.files import filesystem
from thresher.spec import SourceSection
from thresher.store import Store

__all__ = ["reference_profile", "reference_subject"]

CHUNK_ROWS = 65_536


def reference_profile(store: Store, uri: str, segment_by: str | None = None) -> Profile:
    """The profile of every column of the file(s) at `uri` (Parquet, CSV, JSONL; one file,
    a folder or a glob, local or any fsspec URL), each column an input; with `segment_by`,
    per value of that column too. Read once per version of the files, then cached."""
    uri = uri if "://" in uri else os.path.abspath(uri)
    try:
        section = SourceSection(uri=uri)
    except ValidationError as exc:
        raise SourceError("; ".join(describe_errors(exc))) from exc
    source = open_source(section)
    plan = source.plan()
    subject = reference_subject(uri, plan, segment_by)
    cached = store.profiles.get(subject)
    if cached is not None:
        return cached
    profile = _profile_plan(source, plan, segment_by)
    store.profiles.save(subject, profile)
    return profile


def reference_subject(uri: str, plan: Plan, segment_by: str | None) -> str:
    """`file:<uri>@<version>` (and `#segment_by=<column>` when profiled by segment): one
    file's version is `<size>-<mtime or ETag>`, several files' a digest of theirs."""
    paths = list(dict.fromkeys(s.path for s in plan.shards))
    if len(paths) == 1:
        version = _version(paths[0])
    else:
        listing = "\n".join(f"{p} {_version(p)}" for p in paths)
        version = hashlib.sha256(listing.encode()).hexdigest()[:16]
    return f"file:{uri}@{version}" + (f"#segment_by={segment_by}" if segment_by else "")


def _version(path: str) -> str:
    if "://" not in path:
        stat = os.stat(path)
        return f"{stat.st_size}-{stat.st_mtime_ns}"
    fs, inner = filesystem(path)
    info = fs.info(inner)
    tag = info.get("ETag") or info.get("mtime") or info.get("LastModified") or ""
    return f"{info.get('size') or 0}-{str(tag).strip(chr(34))}"


def _profile_plan(source: Source, plan: Plan, segment_by: str | None) -> Profile:
    """Every column of every shard as inputs, in shard order, each shard sampled with
    its index as seed (as a job's workers do), merged."""
    rows = [s.rows for s in plan.shards]
    known = None if any(r is None for r in rows) else sum(int(r or 0) for r in rows)
    rate = sample_rate_for(known, MonitorSection().sample_rows)
    if segment_by is not None and segment_by not in plan.schema.names:
        raise SourceError(f"segment_by: the reference file has no column {segment_by!r}")
    reader = source.reader(plan.schema, list(plan.schema.names))
    no_outputs = pa.table({})
    profiles = []
    for shard in plan.shards:
        profiler = ShardProfiler(rate, shard.index, segment_by)
        for chunk in reader.read(shard, CHUNK_ROWS):
            segments = None
            if segment_by is not None:
                column = chunk.table.column(segment_by)
                segments = (column, pa.chunked_array([], column.type))
            profiler.update(chunk.table, no_outputs, segments)
        profiles.append(profiler.profile())
    merged = merge_profiles(profiles)
    merged.segment_by = segment_by
    return merged
