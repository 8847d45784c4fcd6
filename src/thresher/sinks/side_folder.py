"""A lakehouse table sink's side folder, `<table location>/_thresher/`: what the Delta and
Iceberg sinks keep beside their table, each doing with the parts what its table does.

A job's parts are staged there (`_staging/`) by the workers and committed into the job's
pending folder (`_pending/<job>/`) shard by shard; the sink's `finish` makes them the
table's in one commit. A retry round's fixed rows go to the table shard by shard instead
(`append`), under a ledger key of the round's own (`<job>.r<round>`), and its error parts
replace the published ones. Error parts, `_SUCCESS` and the publish record live here too;
the folder's name starts with `_`, so the table's readers and vacuum leave it alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from thresher.errors import SinkError
from thresher.faults import crash_point
from thresher.sinks.files import FilePartTarget, check_directory
from thresher.sinks.parts import PartLayout, StagedPart, commit_file
from thresher.sinks.publish import (
    MARKER,
    PendingOutput,
    error_layout,
    published_by,
    recover,
    remove_staging,
    started_later,
    write_json,
)
from thresher.sources.files import filesystem

__all__ = ["SIDE", "SideFolder"]

SIDE = "_thresher"  # the side folder's name inside the table's location


@dataclass(frozen=True)
class SideFolder:
    """One job's (or retry round's) side folder at `path`, beside the table `uri`."""

    path: str
    uri: str  # how messages name the table
    job_id: str
    ledger_key: str  # the job's id, or a retry round's `<job>.r<round>`
    retry_round: int | None
    layout: PartLayout  # the job's output parts

    @classmethod
    def of(
        cls, path: str, uri: str, job_id: str, shards: int, retry_round: int | None
    ) -> SideFolder:
        width = max(5, len(str(max(shards - 1, 0))))
        suffix, key = ".parquet", job_id
        if retry_round is not None:
            key, suffix = f"{job_id}.r{retry_round}", f".r{retry_round}{suffix}"
        layout = PartLayout(path, f"part-{job_id}-", suffix, width)
        return cls(path, uri, job_id, key, retry_round, layout)

    def start(
        self,
        *,
        resume: bool,
        overwrite: bool,
        force: bool,
        marker: dict[str, Any],
        check_table: Callable[[], None],
        publish: Callable[[str, dict[str, Any]], None],
    ) -> str:
        """Get the folder ready for the job, having rolled forward any other job's
        publish cut short (`publish`); returns where its error parts go. A first run
        checks the table is one this sink may write (`check_table`) and the folder
        thresher's, and makes the job's pending folder; a resume or a retry round only
        clears staging (the table's own commits know what was committed)."""
        fs, side = filesystem(self.path)
        if resume or self.retry_round is not None:
            self._check_still_ours(overwrite)
            fs.makedirs(side, exist_ok=True)
            remove_staging(fs, side)
        else:
            check_table()
            check_directory(fs, side, force, self.path, "sink.uri")
            if not fs.exists(f"{side}/{MARKER}"):
                write_json(fs, f"{side}/{MARKER}", marker)
            PendingOutput(self.path, self.job_id).create()
        recover(self.path, skip=self.job_id, first=publish)
        return self.errors().root

    def _check_still_ours(self, overwrite: bool) -> None:
        """In overwrite mode, a later job's published table replaced this job's world."""
        owner = published_by(self.path)
        if overwrite and owner is not None and started_later(owner, self.job_id):
            raise SinkError(
                f"sink.uri: {self.uri} now holds job {owner}'s output, a later job than "
                f"{self.job_id}; run the job again instead of resuming it"
            )

    def part_target(self) -> FilePartTarget:
        return FilePartTarget(self.layout, self.errors(), "parquet")

    def commit(
        self,
        output: StagedPart | None,
        errors: StagedPart | None,
        append: Callable[[StagedPart], None],
    ) -> None:
        """The output part (a retry round's `append`ed to the table, a job's into its
        pending folder), then the error part."""
        if output is not None:
            if self.retry_round is not None:
                append(output)
            else:
                self._pending(output, self.layout)
        if output is not None and errors is not None:
            crash_point("mid_commit", output.shard)
        if errors is not None:
            if self.retry_round is not None:
                commit_file(errors, self.errors())
            else:
                self._pending(errors, self.errors())

    def _pending(self, staged: StagedPart, layout: PartLayout) -> None:
        name = layout.final(staged.shard).removeprefix(self.path + "/")
        PendingOutput(self.path, self.job_id).commit(staged, name)

    def errors(self) -> PartLayout:
        """Where the job's error parts are published."""
        return error_layout(self.path, self.layout)
