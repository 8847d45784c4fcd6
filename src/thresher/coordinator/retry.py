"""`thresher retry-errors`: run a finished job's failed rows again, exactly once.

Only rows the model rejected (stage `predict`: it raised, or gave NaN/infinity) and rows
whose file could not be fetched (stage `fetch`: `source.images`) are retried — say, after
the model was fixed or the server came back. Decode errors are input problems no model can
fix; they stay in the error file. Each shard with such rows becomes a retry task
(`worker/tasks.py: RetryTask`) that runs through the job's executor like any shard —
local worker processes or Ray, with the shard timeout, attempts and crash isolation — and
its worker re-reads the shard through the job's own reader and predicts only those rows
(`worker/retry.py`).

Per shard, the steps are ordered so that a crash anywhere leaves every row in exactly one
place, and running `retry-errors` again finishes the round:

1. a worker stages the fixed rows' part and the shard's new error part (what still fails);
2. commit the part (`part-00003.r1.parquet`, or SQL rows under the round's ledger key)
   and record the round's counts for the shard (`output_committed`);
3. replace the error part, then move the fixed rows from errors to output in the shard's
   counts (`done`).

`coordinator/commit.py` holds that order, beside the first run's.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from thresher.coordinator.commit import commit_retry_shard
from thresher.coordinator.job import Job, JobResult, with_workers, worker_setup
from thresher.coordinator.loop import ShardLoop
from thresher.coordinator.progress import QuietReporter, Reporter
from thresher.errors import JobFailed, SpecError
from thresher.executors import make_executor
from thresher.models import model_fingerprint
from thresher.plan import check_features, plan_placement
from thresher.sinks import Sink, open_sink
from thresher.sources import Plan, Shard
from thresher.spec import JobSpec, apply_override, parse_spec
from thresher.store import (
    JobRecord,
    JobState,
    RetryShard,
    RetryShardState,
    ShardState,
    Store,
    open_store,
)
from thresher.worker.tasks import RetryTask, ShardResult, Task

# The stages whose rows may pass another time: the model's (it raised, or gave NaN) and
# the fetch of a row's file (a server that was down, a file not there yet).
RETRIED_STAGES = frozenset({"predict", "fetch"})


def retry_errors(
    job_id: str,
    store: Store | None = None,
    overrides: Sequence[str] = (),
    reporter: Reporter | None = None,
    workers: int | None = None,
) -> JobResult:
    """Retry a job's predict-stage errors; `overrides` may change the `[model]` section,
    `workers` (the slots a server leased the round) its `[run] workers`.

    A round that does not finish (a shard failed, the job was cancelled) leaves the job as
    it was before, with the reason as its message: its output is as published, shard by
    shard, and the next `retry_errors` finishes the round."""
    store = store or open_store()
    before = store.job(job_id)
    record = store.claim(job_id, finished_ok=True)
    try:
        return _round(store, record, overrides, reporter or QuietReporter(), workers)
    except BaseException as exc:
        store.finish(job_id, before.state, before.manifest, f"{exc}")
        raise


def _round(
    store: Store,
    record: JobRecord,
    overrides: Sequence[str],
    reporter: Reporter,
    workers: int | None,
) -> JobResult:
    job_id = record.id
    if any(s.state != ShardState.DONE for s in store.shards(job_id)):
        raise JobFailed(f"job {job_id} has shards that are not done; `thresher resume` it first")
    spec, plan = _spec(record.spec, overrides), Plan.from_json(record.plan)
    spec = spec if workers is None else with_workers(spec, workers)
    job = Job(job_id, spec, plan, check_features(spec, plan), store)
    sink = open_sink(job.spec.sink)
    number = store.retries.begin(job_id, model_fingerprint(job.spec.model).get("sha256"))
    errors = sink.start(job_id, len(job.plan.shards), resume=True, retry_round=number)
    retry = RetryLedger(job, sink, number, store.retries.shards(job_id, number))
    shards = retry.plan()
    reporter.note(f"job {job_id}: retry round {number}, {len(shards)} shard(s) with rejected rows")
    placement = plan_placement(job.spec.run, len(shards))
    executor = make_executor(job.spec.run, placement)
    loop = ShardLoop(job_id, store, retry, executor, reporter, job.spec.run.max_attempts)
    try:
        outcome = loop.run(shards, worker_setup(job, placement, retry.sink)) if shards else None
    finally:
        executor.shutdown()
        reporter.close()
    if outcome is not None and (outcome.failures or outcome.cancelled):
        raise JobFailed(
            f"retry round {number} of job {job_id} did not finish: "
            + ("; ".join(outcome.failures) or "cancelled")
            + "; run `thresher retry-errors` again to finish it"
        )
    store.retries.finish(job_id, number)
    return _conclude(job, sink, errors, record.manifest or {})


@dataclass
class RetryLedger:
    """A retry round's shards: the rows each one retries, and its commit through
    `commit_retry_shard`. Attempts are not recorded as the job's: its shards stay done."""

    job: Job
    sink: Sink  # started for the round: parts under names of their own
    number: int
    progress: dict[int, RetryShard]
    # shard -> (its rows to retry, its other bad records as JSON lines)
    work: dict[int, tuple[frozenset[tuple[int, int]], tuple[str, ...]]] = field(
        default_factory=dict
    )

    def plan(self) -> list[Shard]:
        """The job's shards with rejected rows this round has not finished, from the
        published error parts."""
        for shard in self.job.plan.shards:
            progress = self.progress.get(shard.index)
            if progress is not None and progress.state == RetryShardState.DONE:
                continue
            records = list(self.sink.read_errors(shard.index))
            rows = frozenset(_where(rec) for rec in records if rec["stage"] in RETRIED_STAGES)
            if rows:
                kept = tuple(
                    json.dumps(r, ensure_ascii=False)
                    for r in records
                    if r["stage"] not in RETRIED_STAGES
                )
                self.work[shard.index] = (rows, kept)
        return [s for s in self.job.plan.shards if s.index in self.work]

    def task(self, shard: Shard, number: int) -> Task:
        rows, kept = self.work[shard.index]
        attempt = f"r{self.number}-{number}-{secrets.token_hex(4)}"
        return RetryTask(shard=shard, attempt=attempt, number=number, rows=rows, kept=kept)

    def started(self, task: Task) -> None:
        """The job's own attempts table is about its first run; nothing to record."""

    def failed(self, task: Task, message: str, final: bool) -> None:
        """A failed retry attempt changes nothing committed; the loop reports it."""

    def done(self, result: ShardResult) -> None:
        # a rerun after the part was committed must not commit it again
        committed = self.progress.get(result.shard) is not None
        fixed = (
            None if committed else (result.part, result.rows_out, result.rows_in - result.rows_out)
        )
        commit_retry_shard(
            self.sink, self.job.store, (self.job.id, self.number), fixed, result.errors
        )


def _where(record: dict[str, Any]) -> tuple[int, int]:
    """A rejected row as a retry task names it: (line or row, place in its line)."""
    number = record["line"] if record.get("line") is not None else record["row"]
    return int(number), int(record.get("index") or 0)


def _spec(spec: JobSpec, overrides: Sequence[str]) -> JobSpec:
    """The job's spec, with `--set model.…` overrides (nothing else may change)."""
    outside = [o for o in overrides if not o.strip().startswith("model.")]
    if outside:
        raise SpecError([f"--set {o}: retry-errors can change only model.* keys" for o in outside])
    if not overrides:
        return spec
    raw = spec.model_dump(mode="json")
    for item in overrides:
        apply_override(raw, item)
    return parse_spec(raw)


def _conclude(job: Job, sink: Sink, errors: str, manifest: dict[str, Any]) -> JobResult:
    """New counts and the retry rounds into the manifest; the job succeeds if its error
    rate now allows it."""
    from thresher.coordinator.manifest import error_rate_problem

    totals = job.store.totals(job.id)
    manifest = {
        **manifest,
        "rows_in": totals.rows_in,
        "rows_out": totals.rows_out,
        "rows_error": totals.rows_error,
        "retries": job.store.retries.rounds(job.id),
    }
    problems = error_rate_problem(job.spec, totals)
    state = JobState.FAILED if problems else JobState.SUCCEEDED
    if problems:
        sink.abort()
    else:
        sink.finish(manifest)
    job.store.finish(job.id, state, manifest, "; ".join(problems) or None)
    return JobResult(job.id, state, manifest, job.spec.sink.uri, errors, problems, job.spec.sink)
