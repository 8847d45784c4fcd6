"""The sink contract: workers stage parts, the coordinator commits and publishes them.

Lifecycle, all in the coordinating process except the `PartTarget`'s half:

    start(job_id, shard_count, resume)
      -> [workers: part_target().open(shard, attempt).write(...).close(),
                   bad records to part_target().error_staging(shard, attempt)]
      -> commit(staged output, staged errors) per shard
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
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from thresher.sinks.parts import StagedPart


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

    def start(
        self, job_id: str, shard_count: int, resume: bool, retry_round: int | None = None
    ) -> str:
        """Prepare for a job: check the output may be written, finish any publish a crash
        cut short. On resume, remove stale staging files; never remove output. For retry
        round `retry_round` of a finished job, parts are committed under names (or ledger
        keys) of the round's own, straight into the published output: they add to a
        shard's output, never replace it, and an error part replaces the shard's.
        Returns where the job's bad records are published, for the user to read."""
        ...

    def part_target(self) -> PartTarget: ...

    def commit(self, output: StagedPart | None, errors: StagedPart | None) -> None:
        """Commit a shard's staged output part and its error part (either may be None:
        not committed now), exactly once: a commit redone after a crash leaves the
        shard's rows there once."""
        ...

    def finish(self, manifest: dict[str, Any]) -> None:
        """Every shard is committed: publish the output (replacing the previous one in
        overwrite mode) and its `_SUCCESS` manifest."""
        ...

    def abort(self) -> None:
        """The job failed or was cancelled: remove staging, publish nothing; committed
        parts wait for `thresher resume`."""
        ...

    def read_output(self) -> Iterator[pa.Table]:
        """The published output, as tables (part by part, in input order, where the
        output has an order)."""
        ...

    def read_errors(self, shard: int | None = None) -> Iterator[dict[str, Any]]:
        """The published bad records: one shard's (once started for the job), or all."""
        ...


@runtime_checkable
class WritesPaths(Protocol):
    """A sink that says where it writes, so the guard (`guard.py`) keeps the job store and
    the job's input out of its reach. Optional: a sink without it is not checked."""

    def written_paths(self) -> list[str]:
        """The folders and files (local paths or URLs) the sink writes, and in overwrite
        mode replaces."""
        ...


@runtime_checkable
class HoldsOutput(Protocol):
    """A sink whose committed parts stay unpublished until `finish`, and can be thrown
    away instead: the publish gate can hold its jobs (`[publish] checks`). Optional: a
    job whose sink lacks it cannot have checks."""

    def discard(self, job_id: str) -> None:
        """Remove job `job_id`'s committed, unpublished output and error parts, leaving
        the published output as it was. Idempotent; needs no `start`."""
        ...
