"""Jobs, start to end: plan once, run the shards, finish with a manifest — or resume.

Only this process (the coordinator) touches the job store and the sink's commit side;
workers only stage parts. That split is what makes exactly-once possible.
"""

from __future__ import annotations

import secrets
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from thresher.coordinator.gate import hold_if_failing
from thresher.coordinator.loop import JobLedger, LoopOutcome, ShardLoop
from thresher.coordinator.manifest import RunFacts, build_manifest, error_rate_problem
from thresher.coordinator.prepare import checked_sink, plan_job
from thresher.coordinator.profile_fold import ProfileFold
from thresher.coordinator.progress import QuietReporter, Reporter
from thresher.errors import JobFailed, ThresherError
from thresher.executors.base import make_executor
from thresher.faults import crash_point
from thresher.models import LoadContext
from thresher.monitor.setup import profile_setup
from thresher.plan import Placement, check_features, known_rows, place
from thresher.sinks import Sink, open_sink
from thresher.sources import Plan, Shard, open_source, tell_published
from thresher.spec import JobSpec, SinkSection
from thresher.store import JobState, ShardState, Store, beating, open_store, this_owner
from thresher.worker import tracing
from thresher.worker.tasks import WorkerSetup


@dataclass
class JobResult:
    """How a job ended: its manifest when it succeeded, its problems when it did not.

    `output` and `errors_uri` say where the predictions and the bad records are
    published; `to_arrow()` / `to_pandas()` read the predictions back and `errors` the
    bad records, from any sink that reads back (files, tables)."""

    job_id: str
    state: JobState
    manifest: dict[str, Any]
    output: str
    errors_uri: str
    problems: list[str] = field(default_factory=list)
    sink: SinkSection | None = field(default=None, repr=False)

    @property
    def succeeded(self) -> bool:
        return self.state == JobState.SUCCEEDED

    def raise_for_state(self) -> JobResult:
        """This result, or JobFailed (carrying it) when the job did not succeed."""
        if not self.succeeded:
            why = "; ".join(self.problems) or "no reason given"
            raise JobFailed(f"job {self.job_id} {self.state.value}: {why}", result=self)
        return self

    def to_arrow(self) -> pa.Table:
        """The published predictions as one table. A job that did not succeed published
        nothing of its own: reading it raises JobFailed, never an empty or older table."""
        self.raise_for_state()
        tables = list(self._sink().read_output())
        return pa.concat_tables(tables) if tables else pa.table({})

    def to_pandas(self) -> Any:
        """The published predictions as a pandas DataFrame (see `to_arrow`)."""
        return self.to_arrow().to_pandas()

    @property
    def errors(self) -> pa.Table:
        """The job's bad records, one row each: where (line or row), stage, error,
        message, the id when known, and the raw record."""
        records = list(self._sink().read_errors())
        names = ["source", "line", "row", "id", "stage", "error", "message", "raw"]
        return pa.table({name: [r.get(name) for r in records] for name in names})

    def _sink(self) -> Sink:
        if self.sink is None:
            raise ThresherError("this result was made without its sink; open it with the spec")
        return open_sink(self.sink)


@dataclass(frozen=True)
class Job:
    """A job ready to run: its spec, frozen plan, model inputs and where it is recorded."""

    id: str
    spec: JobSpec
    plan: Plan
    features: list[str]
    store: Store


def new_job_id() -> str:
    """Sortable by start time, unique without coordination: `20261130-020304-a1b2c3`."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def run_job(
    spec: JobSpec,
    store: Store | None = None,
    reporter: Reporter | None = None,
    queued_id: str | None = None,
) -> JobResult:
    """Plan and run a job to its end: a new one, or the queued job `queued_id` (already
    claimed from the store's queue). Raises SpecError before any work if the spec does not
    fit the data; otherwise returns a JobResult, succeeded or not."""
    store = store or open_store()
    with _beating(store):
        return _run_job(spec, store, reporter, queued_id)


def _run_job(
    spec: JobSpec, store: Store, reporter: Reporter | None, queued_id: str | None
) -> JobResult:
    try:
        plan, features = plan_job(spec)
    except ThresherError as exc:
        if queued_id:
            store.finish(queued_id, JobState.FAILED, None, str(exc))
        raise
    job = Job(queued_id or new_job_id(), spec, plan, features, store)
    if queued_id:
        store.set_plan(job.id, plan.to_json())
    else:
        store.create_job(job.id, spec.job.name, spec, plan.to_json())
    told = reporter or QuietReporter()
    try:
        # Told as soon as the job is recorded, before its sink starts: whoever watches
        # (`thresher run --json`) learns the id of every job that ends, even one whose
        # sink refuses to start.
        placement = _announce(job, plan.shards, told)
        sink = checked_sink(spec, store.url, plan)
        errors = sink.start(job.id, len(plan.shards), resume=False)
    except Exception as exc:  # the job is recorded: it must not stay `running` forever
        told.close()
        store.finish(job.id, JobState.FAILED, None, str(exc) or type(exc).__name__)
        raise
    return _drive(job, (sink, errors), plan.shards, placement, told)


def resume_job(
    job_id: str,
    store: Store | None = None,
    reporter: Reporter | None = None,
    force: bool = False,
    workers: int | None = None,
) -> JobResult:
    """Finish a job that stopped (crashed, killed, failed, cancelled, preempted) from its
    stored plan: done shards are kept, the rest are run again (by `workers` workers, when
    given: the slots the service leased it this time)."""
    store = store or open_store()
    with _beating(store):
        return _resume_job(job_id, store, reporter, force, workers)


def _resume_job(
    job_id: str, store: Store, reporter: Reporter | None, force: bool, workers: int | None
) -> JobResult:
    record = store.claim(job_id, force=force)
    crash_point("resume_start")
    spec = record.spec if workers is None else with_workers(record.spec, workers)
    plan = Plan.from_json(record.plan)
    job = Job(job_id, spec, plan, check_features(spec, plan), store)
    done = {s.index for s in store.shards(job_id) if s.state == ShardState.DONE}
    sink = checked_sink(spec, store.url, plan)
    # With nothing recorded as committed, the first run may have died before the sink
    # was even prepared: start it afresh (anything it did commit is redone anyway).
    errors = sink.start(job_id, len(plan.shards), resume=bool(done))
    remaining = [s for s in plan.shards if s.index not in done]
    told = reporter or QuietReporter()
    return _drive(job, (sink, errors), remaining, _announce(job, remaining, told), told)


def _beating(store: Store) -> AbstractContextManager[None]:
    """A coordinator that owns its job itself beats its heartbeat row while it runs, so a
    `thresher resume` on another host knows when it died; one that runs a service job in
    its server's name leaves that to the server (`store/_owners.py`)."""
    if store.owner != this_owner():
        return nullcontext()
    return beating(store.url, store.owner)


def _announce(job: Job, shards: list[Shard], reporter: Reporter) -> Placement:
    """Where the job's `shards` run (`plan.place`), told to `reporter` with the job's id."""
    placement = place(job.spec, shards, job.store)
    reporter.planned(job.id, len(shards), known_rows(shards), placement.describe())
    return placement


def _drive(
    job: Job,
    output: tuple[Sink, str],
    shards: list[Shard],
    placement: Placement,
    reporter: Reporter,
) -> JobResult:
    """Run `shards` through the job's executor (as `placement` says) into `output` (the
    started sink and where it publishes bad records), then finish the job: in a span of
    the job's trace, which its shards' spans join (`worker/tracing.py`)."""
    sink = output[0]
    started, clock = datetime.now(UTC), time.perf_counter()
    executor = make_executor(job.spec.run, placement)
    with tracing.span("thresher.job", job.spec.job.traceparent, job_id=job.id) as traced:
        traced.set(name=job.spec.job.name, shards=len(shards), workers=placement.workers)
        try:
            setup = worker_setup(job, placement, sink)
            order = sorted(shard.index for shard in job.plan.shards)
            profiled = setup.profile is not None
            profiles = ProfileFold(job.store, job.id, order) if profiled else None
            ledger = JobLedger(job.id, job.store, sink, profiles)
            attempts = job.spec.run.max_attempts
            loop = ShardLoop(job.id, job.store, ledger, executor, reporter, attempts)
            outcome = loop.run(shards, setup) if shards else LoopOutcome()
        except BaseException as exc:
            job.store.finish(job.id, JobState.FAILED, None, f"{type(exc).__name__}: {exc}")
            sink.abort()
            raise
        finally:
            executor.shutdown()
            reporter.close()
        sizes = outcome.batch_sizes.most_common(1)
        elapsed = time.perf_counter() - clock
        size = sizes[0][0] if sizes else None
        facts = RunFacts(placement, started, elapsed, outcome.rows_seen, size, outcome.ran_native)
        result = _finish(job, output, outcome, facts, profiles)
        m = result.manifest
        traced.set(state=result.state.value, rows_in=m.get("rows_in"), rows_out=m.get("rows_out"))
        traced.set(rows_error=m.get("rows_error"))
        return result


def _finish(
    job: Job,
    output: tuple[Sink, str],
    outcome: LoopOutcome,
    facts: RunFacts,
    profiles: ProfileFold | None,
) -> JobResult:
    sink, errors_uri = output
    totals = job.store.totals(job.id)
    manifest = build_manifest(job.spec, job.id, totals, facts, job.plan)
    if outcome.cancelled or outcome.preempted:
        sink.abort()
        state, note = (
            (JobState.CANCELLED, "the job was cancelled; `thresher resume` finishes it")
            if outcome.cancelled
            else (JobState.PREEMPTED, "the job was preempted; it resumes when slots free")
        )
        return _ended(job, state, manifest, errors_uri, [note])
    problems = outcome.failures + error_rate_problem(job.spec, totals)
    if problems:
        sink.abort()
        job.store.finish(job.id, JobState.FAILED, manifest, "; ".join(problems))
        return _ended(job, JobState.FAILED, manifest, errors_uri, problems)
    profile = profiles.profile() if profiles is not None else None
    if profile is not None:
        job.store.profiles.save(job.id, profile)
        manifest["profile"] = profile.summary()
    held = hold_if_failing(job.store, job.id, manifest, profile)
    if held:  # recorded `held`: the committed parts wait, the previous output stays live
        sink.abort()
        return _ended(job, JobState.HELD, manifest, errors_uri, held)
    try:
        sink.finish(manifest)
    except ThresherError as exc:  # the publish refused (a merge's repeated id): not running
        job.store.finish(job.id, JobState.FAILED, manifest, str(exc))
        raise
    crash_point("after_publish")
    tell_published(job.spec.source, job.spec.sink.keep_columns, job.plan)
    job.store.finish(job.id, JobState.SUCCEEDED, manifest, None)
    return _ended(job, JobState.SUCCEEDED, manifest, errors_uri, [])


def _ended(
    job: Job, state: JobState, manifest: dict[str, Any], errors_uri: str, problems: list[str]
) -> JobResult:
    return JobResult(
        job.id, state, manifest, job.spec.sink.uri, errors_uri, problems, job.spec.sink
    )


def with_workers(spec: JobSpec, workers: int) -> JobSpec:
    """`spec` run by exactly `workers` workers."""
    return spec.model_copy(update={"run": spec.run.model_copy(update={"workers": workers})})


def worker_setup(job: Job, placement: Placement, sink: Sink) -> WorkerSetup:
    """What every worker of this job needs: reader, model section, columns, part targets."""
    spec, keep = job.spec, job.spec.sink.keep_columns
    profile = profile_setup(spec.monitor, job.plan)
    segment = profile.segment_by if profile else None
    columns = [c for c in [spec.source.id_column, *keep, *job.features, segment] if c]
    return WorkerSetup(
        reader=open_source(spec.source, keep).reader(job.plan.schema, list(dict.fromkeys(columns))),
        model=spec.model,
        context=LoadContext(features=tuple(job.features), threads=placement.threads),
        id_column=spec.source.id_column,
        keep_columns=tuple(keep),
        batch=spec.batch,
        parts=sink.part_target(),
        on_bad_input=spec.errors.on_bad_input,
        profile=profile,
        trace=tracing.current_traceparent(),  # the job's span, where the workers' join
    )
