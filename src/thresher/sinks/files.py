"""Parquet, CSV and JSONL output directories: one part file per shard, and `_SUCCESS`.

Parts are committed into the job's pending folder and published at finish
(`publish.py`): until then the directory holds the previous job's output, whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from thresher.errors import SinkError
from thresher.faults import crash_point
from thresher.sinks.parts import (
    FilePartWriter,
    PartLayout,
    StagedPart,
    commit_file,
    read_part,
)
from thresher.sinks.publish import (
    ERRORS,
    MARKER,
    NOT_PUBLISHED,
    RESERVED,
    SUCCESS,
    PendingOutput,
    discard_pending,
    error_layout,
    published_by,
    published_error_parts,
    read_published_errors,
    recover,
    remove_staging,
    started_later,
    write_json,
    written_by_thresher,
)
from thresher.sources.files import as_url, filesystem
from thresher.spec import SinkSection

SUFFIX = {"parquet": ".parquet", "csv": ".csv", "jsonl": ".jsonl", "arrow": ".arrow"}


@dataclass(frozen=True)
class FilePartTarget:
    """Where a worker stages a shard's output part and its error part."""

    layout: PartLayout
    errors: PartLayout
    file_format: str

    def open(self, shard: int, attempt: str) -> FilePartWriter:
        path = self.layout.staging(shard, attempt)
        return FilePartWriter(path, shard, attempt, self.file_format)

    def error_staging(self, shard: int, attempt: str) -> str:
        return self.errors.staging(shard, attempt)


@dataclass
class FileSink:
    uri: str
    file_format: str
    mode: str = "overwrite"
    force: bool = False
    layout: PartLayout | None = field(default=None, init=False)
    errors: PartLayout | None = field(default=None, init=False)
    pending: PendingOutput | None = field(default=None, init=False)
    retry_round: int | None = field(default=None, init=False)

    @property
    def root(self) -> str:
        return self.uri.rstrip("/")

    def written_paths(self) -> list[str]:
        return [self.root]

    def start(
        self, job_id: str, shard_count: int, resume: bool, retry_round: int | None = None
    ) -> str:
        """Check the directory may be written and finish any publish a crash cut short;
        nothing of the previous output is touched until `finish`. A retry round's parts
        are `part-00003.r1.parquet`: they sort right after the shard's own part."""
        fs, root = filesystem(self.root)
        if resume or retry_round is not None:
            self._check_still_ours(job_id)
            remove_staging(fs, root)
        else:
            check_directory(fs, root, self.force, self.root)
            if not fs.exists(f"{root}/{MARKER}"):
                write_json(fs, f"{root}/{MARKER}", {"format": self.file_format})
        recover(self.root, skip=job_id)
        prefix = "part-" if self.mode == "overwrite" else f"part-{job_id}-"
        width = max(5, len(str(max(shard_count - 1, 0))))
        suffix = SUFFIX[self.file_format]
        if retry_round is not None:
            suffix = f".r{retry_round}{suffix}"
        self.layout = PartLayout(self.root, prefix, suffix, width)
        self.errors = error_layout(self.root, self.layout)
        self.pending = PendingOutput(self.root, job_id)
        self.retry_round = retry_round
        if not resume and retry_round is None:
            self.pending.create()
        return self.errors.root

    def _check_still_ours(self, job_id: str) -> None:
        """In overwrite mode a later job's published output replaced this job's world:
        resuming would put older results over newer ones, so refuse."""
        owner = published_by(self.root)
        if self.mode == "overwrite" and owner is not None and started_later(owner, job_id):
            raise SinkError(
                f"sink.uri: {self.uri} now holds job {owner}'s output, a later job than "
                f"{job_id}; run the job again instead of resuming it"
            )

    def part_target(self) -> FilePartTarget:
        return FilePartTarget(self._layout(), self._errors(), self.file_format)

    def commit(self, output: StagedPart | None, errors: StagedPart | None) -> None:
        """A shard's parts into the pending folder: the output part first, then the
        error part (a retry round's straight into the published output: it adds to a
        finished job's, and its error part replaces the shard's)."""
        if output is not None:
            self._commit(output, self._layout())
        if output is not None and errors is not None:
            crash_point("mid_commit", output.shard)
        if errors is not None:
            self._commit(errors, self._errors())

    def _commit(self, part: StagedPart, layout: PartLayout) -> None:
        if self.retry_round is not None:
            commit_file(part, layout)
        else:
            self._pending().commit(part, self._name(layout.final(part.shard)))

    def finish(self, manifest: dict[str, Any]) -> None:
        fs, root = filesystem(self.root)
        remove_staging(fs, root)
        if self.retry_round is not None:
            write_json(fs, f"{root}/{SUCCESS}", manifest)
            return
        pending = self._pending()
        if pending.published():
            return  # published before a crash cut the job's own bookkeeping short
        pending.publish(manifest, overwrite=self.mode == "overwrite")

    def discard(self, job_id: str) -> None:
        """A rejected held job: its pending parts go; the published output stays."""
        discard_pending(self.root, job_id)

    def abort(self) -> None:
        """Staging goes; committed parts wait, unpublished, for `thresher resume`. A
        folder no job has published to gets `NOT_PUBLISHED`, saying why it has no output
        (a previous job's published output stays as it was)."""
        fs, root = filesystem(self.root)
        remove_staging(fs, root)
        if fs.exists(root) and not fs.exists(f"{root}/{SUCCESS}"):
            job = f"job {self.pending.job_id}" if self.pending is not None else "a job"
            with fs.open(f"{root}/{NOT_PUBLISHED}", "w") as note:
                note.write(
                    f"thresher: {job} ended without publishing its output here (failed,"
                    " cancelled, held or stopped); `thresher status` says why, `thresher resume`"
                    " finishes it. This folder holds no predictions yet.\n"
                )

    def read_output(self) -> Iterator[pa.Table]:
        """The published output, part by part, in name (= input) order."""
        for url in self.published_parts():
            yield read_part(url, self.file_format)

    def published_parts(self) -> list[str]:
        """The URLs of the published output parts, in name (= input) order: what a
        download streams as it is."""
        fs, root = filesystem(self.root)
        return [as_url(fs, p) for p in sorted(fs.glob(f"{root}/part-*{SUFFIX[self.file_format]}"))]

    def committed_parts(self, job_id: str) -> tuple[list[str], list[str]]:
        """The output and error parts job `job_id` has committed so far, in name (= input)
        order: while it runs, those waiting in its pending folder; once published (or if
        it never started), the published ones."""
        fs, _ = filesystem(self.root)
        _, pending = filesystem(PendingOutput(self.root, job_id).folder)
        if not fs.exists(pending):
            return self.published_parts(), self.published_error_parts()
        outputs = sorted(fs.glob(f"{pending}/part-*{SUFFIX[self.file_format]}"))
        errors = sorted(fs.glob(f"{pending}/{ERRORS}/part-*.jsonl"))
        return [as_url(fs, p) for p in outputs], [as_url(fs, p) for p in errors]

    def published_error_parts(self) -> list[str]:
        """The URLs of the published error parts (JSONL), in name (= input) order."""
        return published_error_parts(self.root)

    def read_errors(self, shard: int | None = None) -> Iterator[dict[str, Any]]:
        """The published bad records: one shard's (after `start`), or all, in order."""
        part = None if shard is None else self._errors().final(shard)
        return read_published_errors(self.root, part)

    def _errors(self) -> PartLayout:
        if self.errors is None:
            raise SinkError("the sink was not started")
        return self.errors

    def _layout(self) -> PartLayout:
        if self.layout is None:
            raise SinkError("the sink was not started")
        return self.layout

    def _pending(self) -> PendingOutput:
        if self.pending is None:
            raise SinkError("the sink was not started")
        return self.pending

    def _name(self, final: str) -> str:
        return final.removeprefix(self.root + "/")


def check_directory(fs: Any, root: str, force: bool, uri: str, field: str = "sink.uri") -> None:
    """A directory holding anything overwrite would remove is refused unless thresher's
    own marker says it is thresher's (`written_by_thresher`) or the sink is forced; so is
    a path that is a file. `field` is the spec field that names the folder."""
    if fs.exists(root) and not fs.isdir(root):
        raise SinkError(
            f"{field}: {uri} is a file; a file sink writes a folder of parts: name a new"
            " or empty folder"
        )
    try:
        fs.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise SinkError(f"{field}: cannot make the folder {uri}: {exc.strerror or exc}") from None
    names = {p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)}
    if names - RESERVED and not force and not written_by_thresher(fs, root):
        raise SinkError(
            f"{field}: {uri} is not empty and thresher did not write it; "
            "choose an empty directory or set sink.force = true to overwrite it"
        )


def file_sink(section: SinkSection) -> FileSink:
    """The `parquet`, `csv` and `jsonl` sink plug-ins: a directory of part files."""
    assert section.format is not None
    return FileSink(section.uri, section.format, section.mode, section.force)
