"""thresher: run a trained model over a large dataset, exactly once per record.

From a notebook, the data and the model in memory:

>>> import thresher
>>> scored = thresher.predict(df, model)                 # doctest: +SKIP

A job with a sink, recorded in the store, from a spec file or from memory:

>>> result = thresher.run(thresher.load_spec("score.toml"))          # doctest: +SKIP
>>> result = thresher.run(data=df, model=model, sink="scores/")      # doctest: +SKIP
>>> result.manifest["rows_out"], result.to_pandas()                  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from thresher.errors import (
    BadInputError,
    JobFailed,
    ModelLoadError,
    ModelOutputError,
    MonitorError,
    SinkError,
    SourceError,
    SpecError,
    ThresherError,
)
from thresher.spec import JobSpec, load_spec, parse_spec

if TYPE_CHECKING:
    import pyarrow as pa

    from thresher.coordinator.job import JobResult
    from thresher.coordinator.progress import Reporter
    from thresher.monitor.actuals import ActualsPart
    from thresher.monitor.drift_report import DriftReport
    from thresher.monitor.quality import Quality, QualityTrend, Task
    from thresher.profiles.profile import Profile

__all__ = [
    "BadInputError",
    "JobFailed",
    "JobResult",
    "JobSpec",
    "ModelLoadError",
    "ModelOutputError",
    "MonitorError",
    "SinkError",
    "SourceError",
    "SpecError",
    "ThresherError",
    "add_actuals",
    "approve",
    "drift",
    "load_spec",
    "parse_spec",
    "predict",
    "profile",
    "quality",
    "reject",
    "resume",
    "run",
]
__version__ = "0.1.0"

# A library's logs are the application's to show: nothing unless it configures logging.
logging.getLogger("thresher").addHandler(logging.NullHandler())


def __getattr__(name: str) -> Any:
    """`JobResult` on first use: importing the engine here would load the job store, the
    sinks and the progress display into every worker process, which imports this
    package first and needs none of them."""
    if name == "JobResult":
        from thresher.coordinator.job import JobResult

        return JobResult
    raise AttributeError(f"module 'thresher' has no attribute {name!r}")


def predict(data: Any, model: Any, *, progress: bool | None = None, **options: Any) -> Any:
    """Run `model` over `data` and return the predictions, in input order, in the input's
    kind: a pandas DataFrame (on the input's index), a polars DataFrame, or an Arrow
    Table (for Arrow input, a dataset, or a path or URL any source takes).

    `model` is a fitted object — a scikit-learn estimator or pipeline, a LightGBM or
    XGBoost model, a `torch.nn.Module`, a SentenceTransformer, a transformers pipeline,
    an `onnxruntime.InferenceSession`, anything with `predict` or `__call__`, a function
    of a batch, or a class to build once per worker — or a path with `kind=`. Options are
    the spec's own: `columns`, `id_column`, `keep_columns`, `batch_size`, `workers`,
    `device`, `executor`, `outputs`, `kind`, `batch_format`, `model_options`,
    `shard_bytes`, `max_error_rate`. The model runs in this process on every core (its
    library's threads; a booster's trees compiled), unless `workers=` asks for worker
    processes, which share the input written once (and a torch model's weights). A row
    whose value does not fit its column raises BadInputError naming it (its `.errors`
    and `.predictions` the rest), unless `on_bad_input="skip"`.

    >>> scored = thresher.predict(df, model, outputs=["proba"])   # doctest: +SKIP
    """
    from thresher.inmemory.calls import predict as run_predict

    return run_predict(data, model, progress, **options)


def run(
    spec: JobSpec | Mapping[str, object] | None = None,
    store: str | None = None,
    reporter: Reporter | None = None,
    *,
    data: Any = None,
    model: Any = None,
    sink: str | Mapping[str, Any] | None = None,
    raise_on_failure: bool = True,
    progress: bool | None = None,
    **options: Any,
) -> JobResult:
    """Run a job to its end and return how it went.

    Either `spec` — a JobSpec or the same as a mapping (validated here) — or `data`,
    `model` and `sink`: data and model as `predict` takes them, `sink` a path or URL (or
    a sink section as a mapping), with `predict`'s options. `store` a store URL (default:
    `$THRESHER_STORE` or the user's SQLite store). Raises SpecError before any work when
    the spec or the input's columns do not fit, and JobFailed (its `.result` the
    JobResult) when the job does not succeed, unless `raise_on_failure=False`. A
    progress bar shows in a notebook or a terminal unless `progress=False` (or a
    `reporter` is given).

    >>> result = thresher.run(data=df, model=model, sink="scores/")   # doctest: +SKIP
    >>> result.to_pandas(), result.errors                             # doctest: +SKIP
    """
    from thresher.coordinator.job import run_job
    from thresher.inmemory.calls import in_memory_run, reporter_for
    from thresher.store import open_store

    told = reporter or reporter_for(progress)
    if spec is None:
        if data is None or model is None or sink is None:
            raise SpecError(["run: pass a spec, or data, model and sink"])
        result = in_memory_run(data, model, sink, store=store, reporter=told, options=options)
    else:
        if data is not None or model is not None or sink is not None or options:
            raise SpecError(["run: pass a spec, or data, model and sink, not both"])
        job = spec if isinstance(spec, JobSpec) else parse_spec(spec)
        result = run_job(job, open_store(store), told)
    return result.raise_for_state() if raise_on_failure else result


def resume(
    job_id: str,
    store: str | None = None,
    reporter: Reporter | None = None,
    *,
    data: Any = None,
    model: Any = None,
    raise_on_failure: bool = True,
) -> JobResult:
    """Finish a stopped job from its stored plan (see `thresher resume`). A job run from
    memory needs its `data` and `model` again; each is checked against the job's by its
    fingerprint, and a different one is refused, naming which."""
    from thresher.coordinator.job import resume_job
    from thresher.inmemory.calls import in_memory_resume
    from thresher.store import open_store

    if data is not None or model is not None:
        result = in_memory_resume(job_id, data, model, store, reporter)
    else:
        result = resume_job(job_id, open_store(store), reporter)
    return result.raise_for_state() if raise_on_failure else result


def approve(job_id: str, store: str | None = None) -> JobResult:
    """Publish job `job_id`, held by its `[publish] checks`, exactly as a passing job is
    published (see `thresher approve`); returns its result, succeeded, whose `to_pandas()`
    reads the output. Safe to call again, after a crash or twice. Sends no webhook, as
    `run` sends none: the CLI and the service do. Raises StoreError for a job not held.

    >>> result = thresher.run(spec, raise_on_failure=False)   # doctest: +SKIP
    >>> if result.state == "held":                             # doctest: +SKIP
    ...     print(result.problems); thresher.approve(result.job_id)
    """
    from thresher.coordinator.gate import approve_job
    from thresher.store import open_store

    opened = open_store(store)
    try:
        return _decided(approve_job(opened, job_id))
    finally:
        opened.db.close()


def reject(job_id: str, store: str | None = None) -> JobResult:
    """Discard the staged output of job `job_id`, held by its `[publish] checks`; the
    previous output stays as it is (see `thresher reject`). Safe to call again. Raises
    StoreError for a job not held."""
    from thresher.coordinator.gate import reject_job
    from thresher.store import open_store

    opened = open_store(store)
    try:
        return _decided(reject_job(opened, job_id))
    finally:
        opened.db.close()


def _decided(record: Any) -> JobResult:
    """The JobResult of a job a decision moved on, from its store record. Where its bad
    records are published is the sink's to say (`errors` reads them); not known here."""
    from thresher.coordinator.job import JobResult

    manifest = record.manifest or {}
    problems = [] if record.state.value == "succeeded" else [record.message or "rejected"]
    sink = record.spec.sink
    return JobResult(record.id, record.state, manifest, sink.uri, "", problems, sink)


def drift(
    baseline: str | Profile,
    current: str | Profile,
    store: str | None = None,
    columns: list[str] | None = None,
) -> DriftReport:
    """How far `current` has moved from `baseline`, column by column, from their profiles
    alone (see `thresher drift`). Each side is a job id, a job name (its newest succeeded
    job), a reference file's path (profiled once, then cached in the store) or a
    `thresher.monitor.Profile`. Raises MonitorError when a side cannot be found.

    >>> report = thresher.drift("nightly", tonight_job_id)   # doctest: +SKIP
    >>> report.verdict, report.drifted                        # doctest: +SKIP
    ('drift', ['income'])
    >>> report.column("income").psi                           # doctest: +SKIP
    0.31
    """
    from thresher.monitor.subjects import Subject, compare_subjects, resolve
    from thresher.store import open_store

    site = open_store(store) if isinstance(baseline, str) or isinstance(current, str) else None

    def side(what: str | Profile, segment_by: str | None, label: str) -> Subject:
        if not isinstance(what, str):
            return Subject(label, what)
        assert site is not None
        return resolve(site, what, segment_by)

    now = side(current, None, "current")
    then = side(baseline, now.profile.segment_by, "baseline")
    return compare_subjects(then, now, columns)


def profile(job_id: str, store: str | None = None) -> Profile:
    """A succeeded job's profile: every model input and output column as the job saw it,
    made in the same pass as its predictions.

    >>> p = thresher.profile("20261201-020000-a1b2c3")              # doctest: +SKIP
    >>> p.columns["age"].moments.mean, p.columns["prediction"].top(2)  # doctest: +SKIP
    (41.7, [('0', 81234), ('1', 18766)])
    >>> p.describe()["columns"]["age"]["quantiles"]["p50"]          # doctest: +SKIP
    40.0
    """
    from thresher.store import open_store

    return open_store(store).profiles.of_job(job_id)


def add_actuals(
    job_id: str,
    data: str | pa.Table | list[dict[str, Any]],
    *,
    label_column: str = "label",
    id_column: str | None = None,
    query: str | None = None,
    store: str | None = None,
) -> ActualsPart:
    """Join late labels to job `job_id`'s predictions by id (see `thresher actuals add`).

    `data` is a Parquet, CSV or JSONL file (by suffix; a path or fsspec URL), a database
    URL (`sqlite:///…`, `postgresql://…`) with `query`, a pyarrow Table, or a list of
    `{"id": …, "label": …}` records. `id_column` defaults to the job's id column. Adding
    the same part again changes nothing; an id keeps its first label.

    >>> added = add_actuals("20261130-020304-a1b2c3", "outcomes.csv",  # doctest: +SKIP
    ...                     label_column="churned")
    >>> added.matched, added.unknown, f"{added.coverage:.0%}"       # doctest: +SKIP
    (9812, 3, '98%')
    """
    from thresher.monitor.actuals import add_actuals as add
    from thresher.monitor.actuals import read_part
    from thresher.store import open_store

    opened = open_store(store)
    return add(
        opened,
        job_id,
        read_part(
            opened, job_id, data, label_column=label_column, id_column=id_column, query=query
        ),
    )


def quality(
    job_id_or_name: str, store: str | None = None, task: Task | None = None
) -> Quality | QualityTrend:
    """A job's quality over the actuals added so far — metrics, counts, coverage, label
    lag — or, for a job name or schedule, a `QualityTrend` across its succeeded jobs,
    oldest first. `task` forces "classification" or "regression" (default: inferred).

    >>> q = quality("20261130-020304-a1b2c3")                # doctest: +SKIP
    >>> q.task, q.coverage, q.metrics.roc_auc                 # doctest: +SKIP
    ('classification', 0.98, 0.871)
    >>> [job.metrics.f1 for job in quality("nightly").jobs]   # doctest: +SKIP
    [0.80, 0.79, 0.74]
    """
    from thresher.monitor.quality import quality as measure
    from thresher.store import open_store

    return measure(open_store(store), job_id_or_name, task)
