"""The sink contract: workers stage parts, the coordinator commits and publishes them.

Lifecycle, all in the coordinating process except the `PartTarget`'s half:

    start(job_id, shard_count, resume)
      -> [workers: part_target().open(shard, attempt).write(...).close(),
                   bad records to part_target().error_staging(shard, attempt)]
      -> commit_part(staged), commit_errors(staged) per shard
      -> finish(manifest) | abort()
    read_output(), read_errors(): what is published, for downloads, retries, answers

A sink owns a shard's output *and* its bad records. A committed part is invisible to
readers until `finish` publishes the job's output in one step a crash cannot leave half
done; until then they see the previous output, whole. `start` never destroys anything.
Commits are idempotent: committing the same shard twice (a crash between commit and
bookkeeping) still leaves it there once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import pyarrow as pa

from thresher.sinks.parts import PartLayout, StagedPart


class PartWriter(Protocol):
    """Writes one shard's rows, batch by batch, under a staging name."""

    def write(self, table: pa.Table) -> None: ...

    def close(self) -> StagedPart: ...


class PartTarget(Protocol):
    """The worker's half of a sink. Picklable: it travels to worker processes."""

    def open(self, shard: int, attempt: str) -> PartWriter: ...

    def error_staging(self, shard: int, attempt: str) -> str:
        """Where the attempt stages its bad records (JSONL, one per line)."""
        ...


class Sink(Protocol):
    """The coordinator's half of a sink."""

    def start(self, job_id: str, shard_count: int, resume: bool) -> None:
        """Prepare for a job: check the output may be written, finish any publish a crash
        cut short. On resume, remove stale staging files; never remove output."""
        ...

    def part_target(self) -> PartTarget: ...

    def commit_part(self, staged: StagedPart) -> None:
        """Commit one shard's staged output part, exactly once."""
        ...

    def commit_errors(self, staged: StagedPart) -> None:
        """Commit one shard's staged error part, exactly once."""
        ...

    def finish(self, manifest: dict[str, Any]) -> None:
        """Every shard is committed: publish the output (replacing the previous one in
        overwrite mode) and its `_SUCCESS` manifest."""
        ...

    def abort(self) -> None:
        """The job failed or was cancelled: remove staging, publish nothing; committed
        parts wait for `thresher resume`."""
        ...

    def for_retry(self, round_number: int) -> Sink:
        """The same output, but parts committed under names (or ledger keys) of their own
        for retry round `round_number`, so they add to a shard's output, never replace it."""
        ...

    def read_output(self) -> Iterator[pa.Table]:
        """The published output, as tables (part by part, in input order, where the
        output has an order)."""
        ...

    def read_errors(self, shard: int | None = None) -> Iterator[dict[str, Any]]:
        """The published bad records: one shard's (once started for the job), or all."""
        ...

    @property
    def error_layout(self) -> PartLayout:
        """Where this job's published `_errors/` parts are (set by `start`)."""
        ...
