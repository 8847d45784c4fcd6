"""The commit protocol: the one place that orders a finished shard's steps.

Every path that finishes a shard comes here: `run`, `resume`, the service's request
buffer (all through the shard loop) and `retry-errors`.

A shard attempt, finished by a worker (`commit_shard`):

1. the sink commits the staged output part and the error part (`Sink.commit`: for the
   built-in sinks a rename into the job's pending folder, or one ledger-checked
   transaction, then the error part's rename; crash point `mid_commit` between them);
2. the store marks the shard done, with the attempt, its counts and its profile (one
   transaction: a shard redone after a crash replaces, never adds to, its profile).

A crash during or after 1 leaves the shard not done in the store; resume redoes it, and the
redo lands under the same names (or is skipped by the SQL sink's ledger): once. Marking
the shard done first would let a crash leave it done and unwritten.

A retry round's shard (`commit_retry_shard`) adds fixed rows to a finished job's output
and replaces the shard's error part, which is also the input of the round:

1. the sink commits the fixed rows' part (under the round's own names or ledger key);
2. the store records the round's counts for the shard (`output_committed`), so a rerun
   that finds the error part not yet replaced does not commit the fixed rows again;
3. the sink replaces the error part with what still fails;
4. the store marks the round's shard done.
"""

from __future__ import annotations

from thresher.faults import crash_point
from thresher.sinks import Sink, StagedPart
from thresher.store import Store
from thresher.worker.tasks import ShardResult

__all__ = ["commit_retry_shard", "commit_shard"]


def commit_shard(sink: Sink, store: Store, job_id: str, result: ShardResult) -> None:
    """Commit one finished shard attempt, exactly once (see the module docstring)."""
    crash_point("before_commit", result.shard)
    sink.commit(result.part, result.errors)
    crash_point("after_commit", result.shard)
    counts = (result.rows_in, result.rows_out, result.rows_error)
    store.shard_done(
        job_id, result.shard, result.attempt, counts, result.seconds, profile=result.profile
    )


def commit_retry_shard(
    sink: Sink,
    store: Store,
    retry: tuple[str, int],
    fixed: tuple[StagedPart, int, int] | None,
    still_failing: StagedPart,
) -> None:
    """Commit one shard of a retry round, `retry` = (job id, round number). `fixed` is
    the part of rows that now pass with (rows fixed, rows still failing), or None when an
    earlier run of the round already committed it (step 2 is recorded)."""
    job_id, round_number = retry
    if fixed is not None:
        part, passed, failed = fixed
        sink.commit(part, None)
        store.retries.output_committed(job_id, round_number, part.shard, (passed, failed))
    crash_point("retry_after_output", still_failing.shard)
    sink.commit(None, still_failing)
    crash_point("retry_after_errors", still_failing.shard)
    store.retries.shard_done(job_id, round_number, still_failing.shard)
