"""Parquet, CSV and JSONL output directories: one part file per shard, and `_SUCCESS`."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from thresher.errors import SinkError
from thresher.sinks.parts import STAGING, FilePartWriter, PartLayout, StagedPart, commit_file
from thresher.sources.files import filesystem

SUCCESS = "_SUCCESS"
MARKER = "_thresher.json"  # written at start: this directory is thresher's to manage
ERRORS = "_errors"
SUFFIX = {"parquet": ".parquet", "csv": ".csv", "jsonl": ".jsonl"}


@dataclass(frozen=True)
class FilePartTarget:
    layout: PartLayout
    file_format: str

    def open(self, shard: int, attempt: str) -> FilePartWriter:
        path = self.layout.staging(shard, attempt)
        return FilePartWriter(path, shard, attempt, self.file_format)


@dataclass
class FileSink:
    uri: str
    file_format: str
    mode: str = "overwrite"
    force: bool = False
    layout: PartLayout | None = field(default=None, init=False)
    errors: PartLayout | None = field(default=None, init=False)

    @property
    def root(self) -> str:
        return self.uri.rstrip("/")

    def start(self, job_id: str, shard_count: int, resume: bool) -> None:
        fs, root = filesystem(self.root)
        if resume:
            self._check_still_ours(fs, root, job_id)
            _remove_staging(fs, root)
        else:
            prepare_directory(fs, root, self.mode, self.force, self.root)
            _write_json(fs, f"{root}/{MARKER}", {"job_id": job_id, "format": self.file_format})
        prefix = "part-" if self.mode == "overwrite" else f"part-{job_id}-"
        width = max(5, len(str(max(shard_count - 1, 0))))
        self.layout = PartLayout(self.root, prefix, SUFFIX[self.file_format], width)
        self.errors = PartLayout(f"{self.root}/{ERRORS}", prefix, ".jsonl", width)

    def _check_still_ours(self, fs: Any, root: str, job_id: str) -> None:
        """In overwrite mode a later job clears the directory: resuming over it would mix
        two jobs' parts, so refuse."""
        if self.mode != "overwrite":
            return
        try:
            with fs.open(f"{root}/{MARKER}", "r") as f:
                owner = json.load(f).get("job_id")
        except FileNotFoundError:
            owner = None
        if owner != job_id:
            raise SinkError(
                f"sink.uri: {self.uri} now holds job {owner or 'unknown'}'s output, not job "
                f"{job_id}'s; run the job again instead of resuming it"
            )

    def part_target(self) -> FilePartTarget:
        return FilePartTarget(self._layout(), self.file_format)

    def commit_part(self, staged: StagedPart) -> None:
        commit_file(staged, self._layout())

    def finish(self, manifest: dict[str, Any]) -> None:
        fs, root = filesystem(self.root)
        _remove_staging(fs, root)
        _write_json(fs, f"{root}/{SUCCESS}", manifest)

    def abort(self) -> None:
        fs, root = filesystem(self.root)
        _remove_staging(fs, root)

    def for_retry(self, round_number: int) -> FileSink:
        """`part-00003.r1.parquet`: sorts right after the shard's own part."""
        layout = self._layout()
        retry = copy.copy(self)
        retry.layout = replace(layout, suffix=f".r{round_number}{layout.suffix}")
        return retry

    @property
    def error_layout(self) -> PartLayout:
        if self.errors is None:
            raise SinkError("the sink was not started")
        return self.errors

    def _layout(self) -> PartLayout:
        if self.layout is None:
            raise SinkError("the sink was not started")
        return self.layout


def prepare_directory(fs: Any, root: str, mode: str, force: bool, uri: str) -> None:
    """Make `root` ready for a job. A non-empty directory thresher did not write is refused
    unless forced; overwrite clears what an earlier job left; `_SUCCESS` always goes, so a
    reader never trusts the directory while this job runs."""
    fs.makedirs(root, exist_ok=True)
    names = {p.rstrip("/").rsplit("/", 1)[-1]: p for p in fs.ls(root, detail=False)}
    ours = MARKER in names or SUCCESS in names
    if names and not ours and not force:
        raise SinkError(
            f"sink.uri: {uri} is not empty and thresher did not write it; "
            "choose an empty directory or set sink.force = true to overwrite it"
        )
    doomed = names.values() if mode == "overwrite" else [names[SUCCESS]] if SUCCESS in names else []
    for path in doomed:
        fs.rm(path, recursive=True)


def _remove_staging(fs: Any, root: str) -> None:
    for staging in (f"{root}/{STAGING}", f"{root}/{ERRORS}/{STAGING}"):
        if fs.exists(staging):
            fs.rm(staging, recursive=True)


def _write_json(fs: Any, path: str, data: dict[str, Any]) -> None:
    """Write via a temporary name and a rename, so a reader sees all of it or none."""
    tmp = f"{path}.tmp"
    with fs.open(tmp, "w") as f:
        json.dump({**data, "written_at": datetime.now(UTC).isoformat()}, f, indent=2)
    fs.mv(tmp, path)
