"""Output that appears whole or not at all: a job's parts wait under `_pending/<job>/` and
move into place only when the job finishes.

A committed part is renamed from `_staging/` to `_pending/<job>/` under its final name, so
readers of the folder see nothing of a running job, and a job that fails, is killed or is
cancelled leaves the previous output exactly as it was. `publish` makes the job's output
the folder's, in steps a crash may interrupt:

1. write `_pending/<job>/_PUBLISH`: every name the job publishes, and its manifest. From
   here the job's output is decided: any later start on this folder rolls it forward.
2. remove `_SUCCESS`, so no reader trusts the folder while it changes;
3. in overwrite mode, remove the previous output that is not among the new names;
4. rename each pending part into place (one already moved is skipped);
5. write `_SUCCESS`, then remove `_pending/<job>/`.

Given `_PUBLISH`, every step can run again, so re-running from step 2 finishes the job.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from thresher.errors import SinkError
from thresher.faults import crash_point
from thresher.sinks.parts import (
    STAGING,
    PartLayout,
    StagedPart,
    commit_to,
    move,
    read_error_records,
)
from thresher.sources.files import as_url, filesystem

SUCCESS = "_SUCCESS"
MARKER = "_thresher.json"  # this folder is thresher's to manage
ERRORS = "_errors"
PENDING = "_pending"
PUBLISH = "_PUBLISH"
# In a folder where no job has published yet, left by one that ended without publishing:
# a reader of the folder (pandas, pyarrow, Spark) stops at it with its name in the error,
# never reads an empty table. The next publish removes it.
NOT_PUBLISHED = "JOB_FAILED"
# thresher's own entries in an output folder: never output, never removed as output
RESERVED = frozenset({SUCCESS, MARKER, PENDING, STAGING})
# Fields only a thresher manifest has: a `_SUCCESS` holding them was published by
# thresher (an output folder from before `_thresher.json`, or one whose marker was lost).
MANIFEST_FIELDS = frozenset({"job_id", "spec_sha256"})
MANIFEST_MAX_BYTES = 64 * 1024 * 1024  # a manifest with a profile is a few MB at most
# What runs for a job's publish before its files move: (job id, its `_PUBLISH` record)
BeforeFiles = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class PendingOutput:
    """One job's not-yet-published parts under `root/_pending/<job_id>/`."""

    root: str
    job_id: str

    @property
    def folder(self) -> str:
        return f"{self.root}/{PENDING}/{self.job_id}"

    def create(self) -> None:
        """Made when the job starts, so that its absence later means the job's output
        was published (by its own finish, or rolled forward by a later start)."""
        fs, folder = filesystem(self.folder)
        fs.makedirs(folder, exist_ok=True)

    def published(self) -> bool:
        fs, folder = filesystem(self.folder)
        return not fs.exists(folder)

    def commit(self, staged: StagedPart, name: str) -> None:
        """Rename a staged part to `name` (relative to the output folder) in the pending
        folder, as `parts.commit_to` does: idempotent, and the latest attempt decides."""
        commit_to(staged, f"{self.folder}/{name}")

    def record_intent(
        self, manifest: dict[str, Any], overwrite: bool, extra: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Step 1: the `_PUBLISH` record, written once (a publish that a crash interrupted
        keeps the record it wrote), with `extra`: what else the sink's `first` needs to
        know of this job when another job's start rolls it forward."""
        fs, folder = filesystem(self.folder)
        intent = f"{folder}/{PUBLISH}"
        if fs.exists(intent):
            with fs.open(intent, "r") as f:
                return json.load(f)  # type: ignore[no-any-return]
        names = sorted(_output_names(fs, folder)) if fs.exists(folder) else []
        record = {**(extra or {}), "names": names, "overwrite": overwrite, "manifest": manifest}
        fs.makedirs(folder, exist_ok=True)
        write_json(fs, intent, record)
        return record

    def publish(
        self,
        manifest: dict[str, Any],
        overwrite: bool,
        first: BeforeFiles | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Steps 1-5: the job's output replaces (overwrite) or joins (append) the folder's.
        `first(job_id, record)` runs once the record (holding `extra`) is written, before
        any file moves (a SQL sink swaps its table there)."""
        record = self.record_intent(manifest, overwrite, extra)
        if first is not None:
            first(self.job_id, record)
        fs, folder = filesystem(self.folder)
        finish_publish(fs, self.root, folder, record)


def finish_publish(fs: Any, root_url: str, folder: str, record: dict[str, Any]) -> None:
    """Steps 2-5 of a publish whose `_PUBLISH` record is written."""
    _, root = filesystem(root_url)
    names = set(record["names"])
    for stale in (SUCCESS, NOT_PUBLISHED):
        if fs.exists(f"{root}/{stale}"):
            fs.rm(f"{root}/{stale}")
    if record["overwrite"]:
        for name in sorted(set(_output_names(fs, root)) - names):
            fs.rm(f"{root}/{name}")
    for index, name in enumerate(sorted(names)):
        if index == len(names) // 2:
            crash_point("mid_publish")
        src = f"{folder}/{name}"
        if fs.exists(src):
            fs.makedirs(f"{root}/{name}".rsplit("/", 1)[0], exist_ok=True)
            move(fs, src, f"{root}/{name}")
    write_json(fs, f"{root}/{SUCCESS}", record["manifest"])
    fs.rm(folder, recursive=True)
    if not pending_jobs(fs, root):
        fs.rm(f"{root}/{PENDING}", recursive=True)


def recover(root_url: str, skip: str | None = None, first: BeforeFiles | None = None) -> None:
    """Finish every publish a crash cut short in this folder (but job `skip`'s, which its
    own resume finishes), calling `first` for each as `PendingOutput.publish` does."""
    fs, root = filesystem(root_url)
    for job_id in pending_jobs(fs, root):
        intent = f"{root}/{PENDING}/{job_id}/{PUBLISH}"
        if job_id == skip or not fs.exists(intent):
            continue
        with fs.open(intent, "r") as f:
            record = json.load(f)
        if first is not None:
            first(job_id, record)
        finish_publish(fs, root_url, f"{root}/{PENDING}/{job_id}", record)


def discard_pending(root_url: str, job_id: str) -> None:
    """Remove job `job_id`'s unpublished parts (a rejected held job): the folder's output
    stays as it was. Idempotent; refused once the job's `_PUBLISH` record is written, for
    then its publish is decided and any start on the folder finishes it."""
    fs, root = filesystem(root_url)
    folder = f"{root}/{PENDING}/{job_id}"
    if fs.exists(f"{folder}/{PUBLISH}"):
        raise SinkError(f"job {job_id}'s output at {root_url} is being published; not discarded")
    if fs.exists(folder):
        fs.rm(folder, recursive=True)
    if fs.exists(f"{root}/{PENDING}") and not pending_jobs(fs, root):
        fs.rm(f"{root}/{PENDING}", recursive=True)


def pending_jobs(fs: Any, root: str) -> list[str]:
    """Jobs with parts waiting in this folder."""
    if not fs.isdir(f"{root}/{PENDING}"):
        return []
    listed = fs.ls(f"{root}/{PENDING}", detail=False)
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listed)


def published_by(root_url: str) -> str | None:
    """The job whose output the folder holds now, from its `_SUCCESS`; None if none."""
    fs, root = filesystem(root_url)
    try:
        with fs.open(f"{root}/{SUCCESS}", "r") as f:
            owner = json.load(f).get("job_id")
    except (FileNotFoundError, ValueError):
        return None
    return str(owner) if owner else None


def started_later(owner: str, job_id: str) -> bool:
    """Whether job `owner` started in a later second than job `job_id`, by their ids
    (`20261130-020304-a1b2c3`: the start to the second, then a random suffix). Two jobs
    of one second are not ordered: comparing the suffixes told a job started first that
    it was the later one, half the time."""
    return owner.rsplit("-", 1)[0] > job_id.rsplit("-", 1)[0]


def written_by_thresher(fs: Any, root: str) -> bool:
    """Whether thresher's own marker says the folder is thresher's: `_thresher.json`, or
    a `_SUCCESS` holding a thresher manifest. A bare `_SUCCESS` says nothing: every Spark
    and Hadoop output folder has one."""
    if fs.exists(f"{root}/{MARKER}"):
        return True
    try:
        if int(fs.size(f"{root}/{SUCCESS}")) > MANIFEST_MAX_BYTES:
            return False
        with fs.open(f"{root}/{SUCCESS}", "r") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.keys() >= MANIFEST_FIELDS


def _output_names(fs: Any, root: str) -> Iterator[str]:
    """Output files under `root`, relative to it: everything but thresher's own entries
    (`_errors/` holds output of its own: the error parts)."""
    for path in fs.ls(root, detail=False):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if name in RESERVED or name == PUBLISH:
            continue
        if name == ERRORS and fs.isdir(path):
            yield from (f"{ERRORS}/{inner}" for inner in _output_names(fs, f"{root}/{ERRORS}"))
        elif fs.isdir(path):
            yield from (f"{name}/{inner}" for inner in _output_names(fs, f"{root}/{name}"))
        else:
            yield name


def read_published_errors(root_url: str, part: str | None = None) -> Iterator[dict[str, Any]]:
    """The bad records published under `root_url/_errors/`: of the one error part `part`
    (a URL), or of every part, in name (= input) order."""
    for url in [part] if part is not None else published_error_parts(root_url):
        yield from read_error_records(url)


def published_error_parts(root_url: str) -> list[str]:
    """The URLs of the error parts published under `root_url/_errors/`, in name (= input)
    order."""
    fs, root = filesystem(root_url)
    return [as_url(fs, path) for path in sorted(fs.glob(f"{root}/{ERRORS}/part-*.jsonl"))]


def error_layout(root: str, parts: PartLayout) -> PartLayout:
    """Where the error parts of a job whose output parts are named by `parts` go: JSONL
    files of the same names under `root/_errors/`."""
    return PartLayout(f"{root}/{ERRORS}", parts.prefix, ".jsonl", parts.width)


def remove_staging(fs: Any, root: str) -> None:
    """Remove the staging parts of attempts that never committed."""
    for staging in (f"{root}/{STAGING}", f"{root}/{ERRORS}/{STAGING}"):
        if fs.exists(staging):
            fs.rm(staging, recursive=True)


def write_json(fs: Any, path: str, data: dict[str, Any]) -> None:
    """Write via a temporary name and a rename, so a reader sees all of it or none.
    Through orjson: the standard library's encoder is pure Python once it indents, and a
    manifest with a profile's summary took it 6 ms a write, at a job's end."""
    tmp = f"{path}.tmp"
    stamped = {**data, "written_at": datetime.now(UTC).isoformat()}
    text = orjson.dumps(stamped, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    with fs.open(tmp, "wb") as f:  # one write: json.dump wrote each token apart
        f.write(text)
    move(fs, tmp, path)
