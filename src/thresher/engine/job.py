"""The coordinator: plan a job, hand its shards to an executor, commit what comes back.

Only this process touches the sink's commit side (and, later, the job store); workers only
stage parts. That split is what makes exactly-once possible: a part becomes visible in one
atomic step taken by one process.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from thresher.engine.executor import Executor, Placement, make_executor, plan_placement
from thresher.engine.tasks import (
    Event,
    Progress,
    ShardDone,
    ShardFailed,
    ShardResult,
    ShardTask,
    WorkerBroken,
    WorkerSetup,
)
from thresher.errors import JobFailed, SpecError
from thresher.models import LoadContext, model_fingerprint
from thresher.progress import QuietReporter, Reporter
from thresher.sinks import Sink, open_sink
from thresher.sinks.parts import commit_file
from thresher.sources import Plan, feature_columns, open_source
from thresher.spec import JobSpec


@dataclass
class JobResult:
    """How a job ended: its manifest when it succeeded, its problems when it did not."""

    job_id: str
    succeeded: bool
    manifest: dict[str, Any]
    output: str
    errors: str
    problems: list[str] = field(default_factory=list)


@dataclass
class Counts:
    rows_in: int = 0
    rows_out: int = 0
    rows_error: int = 0
    shards_done: int = 0
    failures: list[str] = field(default_factory=list)


def new_job_id() -> str:
    """Sortable by start time, unique without coordination: `20261130-020304-a1b2c3`."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def run_job(spec: JobSpec, reporter: Reporter | None = None) -> JobResult:
    """Run a whole job to its end. Raises SpecError before any work if the spec does not
    fit the data; otherwise returns a JobResult, succeeded or not."""
    reporter = reporter or QuietReporter()
    started_at, clock = datetime.now(UTC), time.perf_counter()
    job_id = new_job_id()
    plan = open_source(spec.source, spec.sink.keep_columns).plan()
    features = feature_columns(spec.source, plan.schema, spec.sink.keep_columns)
    _check_columns(spec, plan, features)
    placement = plan_placement(spec.run, len(plan.shards))
    sink = open_sink(spec.sink)
    sink.start(job_id, len(plan.shards))
    setup = _worker_setup(spec, plan, features, placement, sink)
    reporter.planned(job_id, len(plan.shards), _known_rows(plan), placement.describe())
    executor = make_executor(spec.run, placement)
    try:
        counts = ShardLoop(spec, sink, executor, reporter).run(plan, setup)
    finally:
        executor.shutdown()
        reporter.close()
    problems = counts.failures + _error_rate_problem(spec, counts)
    manifest = _manifest(spec, job_id, counts, placement, (started_at, time.perf_counter() - clock))
    errors_uri = sink.error_layout.root
    if problems:
        sink.abort()
        return JobResult(job_id, False, manifest, spec.sink.uri, errors_uri, problems)
    sink.finish(manifest)
    return JobResult(job_id, True, manifest, spec.sink.uri, errors_uri)


def _worker_setup(
    spec: JobSpec, plan: Plan, features: list[str], placement: Placement, sink: Sink
) -> WorkerSetup:
    keep = spec.sink.keep_columns
    reader = open_source(spec.source, keep).reader(
        plan.schema, [c for c in [spec.source.id_column, *keep, *features] if c]
    )
    return WorkerSetup(
        reader=reader,
        model=spec.model,
        context=LoadContext(features=tuple(features), threads=placement.threads),
        id_column=spec.source.id_column,
        keep_columns=tuple(keep),
        batch_size=spec.batch.size,
        parts=sink.part_target(),
        errors=sink.error_layout,
        on_bad_input=spec.errors.on_bad_input,
    )


def _check_columns(spec: JobSpec, plan: Plan, features: list[str]) -> None:
    """Every named column must exist in the input: one problem per missing column."""
    have = set(plan.schema.names)
    listed = ", ".join(plan.schema.names)
    problems = []
    if spec.source.id_column and spec.source.id_column not in have:
        problems.append(
            f"source.id_column: no column {spec.source.id_column!r} (input has {listed})"
        )
    problems += [
        f"sink.keep_columns: no column {c!r} (input has {listed})"
        for c in spec.sink.keep_columns
        if c not in have
    ]
    problems += [
        f"source.columns: no column {c!r} (input has {listed})" for c in features if c not in have
    ]
    if not features:
        problems.append("source.columns: no model input columns are left")
    if problems:
        raise SpecError(problems)


@dataclass
class ShardLoop:
    """Feeds shards to an executor and turns its events into commits and counts."""

    spec: JobSpec
    sink: Sink
    executor: Executor
    reporter: Reporter
    counts: Counts = field(default_factory=Counts)

    def run(self, plan: Plan, setup: WorkerSetup) -> Counts:
        self.executor.start(setup)
        for shard in plan.shards:
            self.executor.submit(ShardTask(shard=shard, attempt=_attempt_id(1), number=1))
        while self.executor.pending():
            for event in self.executor.events(timeout=1.0):
                self._handle(event)
        return self.counts

    def _handle(self, event: Event) -> None:
        if isinstance(event, Progress):
            self.reporter.advance(event.rows)
        elif isinstance(event, ShardDone):
            self._commit(event.result)
            self.reporter.shard_done()
        elif isinstance(event, ShardFailed):
            self._failed(event)
        elif isinstance(event, WorkerBroken):
            raise JobFailed(f"a worker could not start: {event.error}: {event.message}")

    def _failed(self, event: ShardFailed) -> None:
        task = event.task
        if event.retry and task.number < self.spec.run.max_attempts:
            self.reporter.note(
                f"shard {task.shard.index}: {event.error}: {event.message}; retrying"
            )
            self.executor.submit(
                ShardTask(task.shard, _attempt_id(task.number + 1), task.number + 1)
            )
            return
        self.counts.failures.append(
            f"shard {task.shard.index} ({task.shard.path}) failed after {task.number} "
            f"attempt(s): {event.error}: {event.message}"
        )

    def _commit(self, result: ShardResult) -> None:
        self.sink.commit_part(result.part)
        commit_file(result.errors, self.sink.error_layout)
        self.counts.rows_in += result.rows_in
        self.counts.rows_out += result.rows_out
        self.counts.rows_error += result.rows_error
        self.counts.shards_done += 1


def _attempt_id(number: int) -> str:
    return f"a{number}-{secrets.token_hex(4)}"


def _known_rows(plan: Plan) -> int | None:
    return (
        None
        if not plan.shards or plan.shards[0].rows is None
        else sum(s.rows or 0 for s in plan.shards)
    )


def _error_rate_problem(spec: JobSpec, counts: Counts) -> list[str]:
    limit = spec.errors.max_error_rate
    if limit is None or counts.rows_in == 0:
        return []
    rate = counts.rows_error / counts.rows_in
    if rate <= limit:
        return []
    return [
        f"{counts.rows_error:,} of {counts.rows_in:,} rows were bad ({rate:.2%}), more than "
        f"errors.max_error_rate = {limit:.2%}; see the error files"
    ]


def _manifest(
    spec: JobSpec, job_id: str, counts: Counts, placement: Placement, timing: tuple[datetime, float]
) -> dict[str, Any]:
    started, seconds = timing
    spec_json = spec.model_dump_json()
    return {
        "job_id": job_id,
        "name": spec.job.name,
        "rows_in": counts.rows_in,
        "rows_out": counts.rows_out,
        "rows_error": counts.rows_error,
        "shards": counts.shards_done,
        "model": {"kind": spec.model.kind, **model_fingerprint(spec.model)},
        "spec_sha256": hashlib.sha256(spec_json.encode()).hexdigest(),
        "spec": json.loads(spec_json),
        "batch_size": spec.batch.size,
        "workers": placement.workers,
        "threads_per_worker": placement.threads,
        "started_at": started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "seconds": round(seconds, 3),
        "rows_per_second": round(counts.rows_in / seconds, 1) if seconds > 0 else None,
    }
