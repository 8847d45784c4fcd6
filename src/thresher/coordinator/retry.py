"""`thresher retry-errors`: run a finished job's failed rows again, exactly once.

Only rows the model rejected (stage `predict`: it raised, or gave NaN/infinity) are
retried — say, after the model was fixed. Decode errors are input problems no model can
fix; they stay in the error file. Each shard with such rows is re-read through the job's
own reader (same plan, same parsing) and only the failed rows are predicted again, in this
process, with the model loaded once.

Per shard, the steps are ordered so that a crash anywhere leaves every row in exactly one
place, and running `retry-errors` again finishes the round:

1. stage the fixed rows' part and the shard's new error part (what still fails);
2. commit the part (`part-00003.r1.parquet`, or SQL rows under the round's ledger key)
   and record the round's counts for the shard (`output_committed`);
3. replace the error part, then move the fixed rows from errors to output in the shard's
   counts (`done`).

`coordinator/commit.py` holds that order, beside the first run's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.coordinator.commit import commit_retry_shard
from thresher.coordinator.job import Job, JobResult, worker_setup
from thresher.errors import JobFailed, SpecError
from thresher.executors.tasks import WorkerSetup
from thresher.models import load_model, model_fingerprint
from thresher.models.base import Model
from thresher.plan import Placement, check_features
from thresher.progress import QuietReporter, Reporter
from thresher.sinks import Sink, open_sink
from thresher.sources import Chunk, Plan, Shard
from thresher.sources.files import filesystem
from thresher.spec import apply_override, parse_spec
from thresher.store import JobState, ShardState, Store, open_store
from thresher.store.retries import RetryShard
from thresher.worker.autobatch import BatchTuner
from thresher.worker.shard import ErrorPart, ShardWork, sorts_by_length, tuner_for


def retry_errors(
    job_id: str,
    store: Store | None = None,
    overrides: Sequence[str] = (),
    reporter: Reporter | None = None,
) -> JobResult:
    """Retry a job's predict-stage errors; `overrides` may change the `[model]` section."""
    store = store or open_store()
    reporter = reporter or QuietReporter()
    record = store.claim(job_id, finished_ok=True)
    if any(s.state != ShardState.DONE for s in store.shards(job_id)):
        raise JobFailed(f"job {job_id} has shards that are not done; `thresher resume` it first")
    spec, plan = _spec(record.spec, overrides), Plan.from_json(record.plan)
    job = Job(job_id, spec, plan, check_features(spec, plan), store)
    sink = open_sink(job.spec.sink)
    sink.start(job_id, len(job.plan.shards), resume=True)
    number = store.retries.begin(job_id, model_fingerprint(job.spec.model).get("sha256"))
    setup = worker_setup(job, Placement(1, os.cpu_count() or 1), sink.for_retry(number))
    model = load_model(job.spec.model, setup.context)
    retry = _Round(job, sink, number, setup, model, tuner_for(setup.batch, model))
    done = store.retries.shards(job_id, number)
    reporter.note(f"job {job_id}: retry round {number}")
    for shard in job.plan.shards:
        progress = done.get(shard.index)
        if progress is None or progress.state != "done":
            retry.shard(shard, progress)
    store.retries.finish(job_id, number)
    return _conclude(job, sink.for_retry(number), record.manifest or {})


@dataclass(frozen=True)
class _Round:
    """One retry round: the job, its sink, and the model loaded once for all shards, in
    batches sized as a job's worker sizes them (text rows sorted by length)."""

    job: Job
    sink: Sink
    number: int
    setup: WorkerSetup
    model: Model
    tuner: BatchTuner

    def shard(self, shard: Shard, progress: RetryShard | None) -> None:
        records = _error_lines(self.sink.error_layout.final(shard.index))
        wanted = {_where(rec) for rec in records if rec["stage"] == "predict"}
        if not wanted:
            return
        attempt = f"r{self.number}"
        staging = self.setup.parts.error_staging(shard.index, attempt)
        errors = ErrorPart(staging, fail_fast=False)
        for rec in records:
            if rec["stage"] != "predict":
                errors.add_line(json.dumps(rec, ensure_ascii=False))
        writer = self.setup.parts.open(shard.index, attempt)
        work = ShardWork(self.setup, self.model, shard, errors, self.tuner)
        fixed = 0
        rows_per_chunk = self.setup.batch.read_rows(sorts_by_length(self.model))
        for chunk in self.setup.reader.read(shard, rows_per_chunk):
            picked = _pick(chunk, wanted, self.setup, shard)
            if picked.table.num_rows:
                output = work.predict_in_batches(picked)
                writer.write(output)
                fixed += output.num_rows
        part, still = writer.close(), errors.close(shard.index, attempt)
        # a rerun after the part was committed must not commit it again
        fixed_part = None if progress is not None else (part, fixed, len(wanted) - fixed)
        commit_retry_shard(
            self.sink.for_retry(self.number),
            self.job.store,
            (self.job.id, self.number),
            fixed_part,
            still,
        )


def _pick(chunk: Chunk, wanted: set[int], setup: WorkerSetup, shard: Shard) -> Chunk:
    """The chunk's rows whose line (text) or row (Parquet) number is in `wanted`.
    A reader's positions map to those numbers by a constant offset per shard."""
    _, base = setup.reader.locate(shard, 0)
    numbers = chunk.positions + base
    mask = np.isin(numbers, np.fromiter(wanted, dtype=np.int64, count=len(wanted)))
    return Chunk(table=chunk.table.filter(pa.array(mask)), positions=chunk.positions[mask])


def _where(record: dict[str, Any]) -> int:
    return int(record["line"] if record.get("line") is not None else record["row"])


def _error_lines(url: str) -> list[dict[str, Any]]:
    fs, path = filesystem(url)
    if not fs.exists(path):
        return []
    with fs.open(path, "r", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _spec(raw: dict[str, Any], overrides: Sequence[str]) -> Any:
    """The job's spec, with `--set model.…` overrides (nothing else may change)."""
    outside = [o for o in overrides if not o.strip().startswith("model.")]
    if outside:
        raise SpecError([f"--set {o}: retry-errors can change only model.* keys" for o in outside])
    for item in overrides:
        apply_override(raw, item)
    return parse_spec(raw)


def _conclude(job: Job, sink: Sink, manifest: dict[str, Any]) -> JobResult:
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
    return JobResult(job.id, state, manifest, job.spec.sink.uri, sink.error_layout.root, problems)
