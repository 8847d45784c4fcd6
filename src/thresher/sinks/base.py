"""The sink contract: workers stage parts, the coordinator commits them.

Lifecycle, all in the coordinating process except `PartTarget.open`:

    start(job_id, shard_count, resume)
      -> [workers: part_target().open(shard, attempt).write(...).close()]
      -> commit_part(staged) per shard -> finish(manifest) | abort()

A staged part is invisible to readers until `commit_part`, which is idempotent: committing
the same shard twice (a crash between commit and bookkeeping) still leaves it there once.
"""

from __future__ import annotations

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


class Sink(Protocol):
    """The coordinator's half of a sink."""

    def start(self, job_id: str, shard_count: int, resume: bool) -> None:
        """Prepare the output for a job: check it may be written, clear it on overwrite.
        On resume, keep what is committed and remove stale staging files instead."""
        ...

    def part_target(self) -> PartTarget: ...

    def commit_part(self, staged: StagedPart) -> None:
        """Make one staged part visible, exactly once."""
        ...

    def finish(self, manifest: dict[str, Any]) -> None:
        """Every part is committed: publish the `_SUCCESS` manifest."""
        ...

    def abort(self) -> None:
        """The job failed: leave committed parts, remove staging, publish nothing."""
        ...

    def for_retry(self, round_number: int) -> Sink:
        """The same output, but parts committed under names (or ledger keys) of their own
        for retry round `round_number`, so they add to a shard's output, never replace it."""
        ...

    @property
    def error_layout(self) -> PartLayout:
        """Where this job's `_errors/` parts go (set by `start`)."""
        ...
