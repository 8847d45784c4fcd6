"""A job's quality once its actuals arrive: the metrics over its labelled rows (see
`metrics.py` for the exact definitions), how many ids are labelled, and how late.

- coverage: labelled ids ÷ predicted ids (the rows of the job's output when its last
  part of actuals came);
- label lag: seconds from the job's finish to each part's arrival, first / last / median
  over its parts;
- the task: classification when the job wrote `proba_` columns or a prediction that is
  not a floating-point number (unless an integer prediction meets labels with fractions),
  regression otherwise; `task=` forces it.

`quality(store, "JOB")` is one job; `quality(store, "NAME")` the trend across the
succeeded jobs of a job name or schedule, oldest first.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from thresher.errors import MonitorError
from thresher.monitor.metrics import (
    ClassificationMetrics,
    RegressionMetrics,
    classification_metrics,
    regression_metrics,
)
from thresher.store import JobRecord, PartRecord, PredictionInfo, Store, StoreError

__all__ = ["Lag", "Quality", "QualityTrend", "Task", "job_quality", "quality", "quality_trend"]

Task = Literal["classification", "regression"]
FLOATS = ("halffloat", "float", "double")


@dataclass(frozen=True)
class Lag:
    """Seconds from the job's finish to the arrival of its parts of actuals."""

    first: float
    last: float
    median: float


@dataclass(frozen=True)
class Quality:
    """One job's quality: `metrics` is None until a label arrives; `notes` say why a
    metric is missing. `unknown` and `repeated` are summed over the job's parts."""

    job_id: str
    name: str
    finished_at: str | None
    task: Task | None
    predicted: int
    labelled: int
    coverage: float | None
    unknown: int
    repeated: int
    parts: int
    lag: Lag | None
    metrics: ClassificationMetrics | RegressionMetrics | None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QualityTrend:
    """The quality of each succeeded job of one job name or schedule, oldest first."""

    name: str
    jobs: tuple[Quality, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "jobs": [job.to_json() for job in self.jobs]}


def quality(store: Store, job_or_name: str, task: Task | None = None) -> Quality | QualityTrend:
    """A job's quality, or the trend across the jobs of a job name or schedule."""
    try:
        store.job(job_or_name)
    except StoreError:
        return quality_trend(store, job_or_name, task)
    return job_quality(store, job_or_name, task)


def quality_trend(store: Store, name: str, task: Task | None = None) -> QualityTrend:
    job_ids = store.views.succeeded_jobs_named(name)
    if not job_ids:
        raise MonitorError(f"no job, and no succeeded job named or scheduled {name!r}")
    return QualityTrend(name, tuple(job_quality(store, job_id, task) for job_id in job_ids))


def job_quality(store: Store, job_id: str, task: Task | None = None) -> Quality:
    """Job `job_id`'s quality over the actuals added to it so far."""
    job = store.job(job_id)
    parts = store.actuals.parts(job_id)
    info = parts[-1].info if parts else None
    predicted = info.predicted if info else _rows_out(store, job)
    rows = _joined_rows(store, job_id)
    notes: list[str] = []
    metrics: ClassificationMetrics | RegressionMetrics | None = None
    chosen: Task | None = None
    if info is not None and rows.num_rows:
        chosen = task or infer_task(info, rows.column("label"))
        metrics = _metrics(job, chosen, rows, info, notes)
    return Quality(
        job_id=job.id,
        name=job.name,
        finished_at=job.finished_at,
        task=chosen,
        predicted=predicted,
        labelled=rows.num_rows,
        coverage=rows.num_rows / predicted if predicted else None,
        unknown=sum(p.unknown for p in parts),
        repeated=sum(p.repeated for p in parts),
        parts=len(parts),
        lag=label_lag(job.finished_at, parts),
        metrics=metrics,
        notes=tuple(notes),
    )


def infer_task(info: PredictionInfo, labels: pa.ChunkedArray) -> Task:
    """Classification for class probabilities or a prediction that is not a float
    (but an integer prediction with fractional labels is regression)."""
    if info.proba_columns:
        return "classification"
    if info.prediction_type in FLOATS:
        return "regression"
    if info.prediction_type.startswith(("int", "uint")):
        numbers = _numbers(labels)
        if numbers is not None and not np.all(np.mod(numbers, 1) == 0):
            return "regression"
    return "classification"


def label_lag(finished_at: str | None, parts: list[PartRecord]) -> Lag | None:
    if finished_at is None or not parts:
        return None
    end = datetime.fromisoformat(finished_at)
    seconds = [(datetime.fromisoformat(p.added_at) - end).total_seconds() for p in parts]
    return Lag(first=min(seconds), last=max(seconds), median=statistics.median(seconds))


def _metrics(
    job: JobRecord, task: Task, rows: pa.Table, info: PredictionInfo, notes: list[str]
) -> ClassificationMetrics | RegressionMetrics:
    if task == "regression":
        labels, predictions = _numbers(rows.column("label")), _numbers(rows.column("prediction"))
        if labels is None or predictions is None:
            raise MonitorError(
                f"job {job.id}: regression needs numeric labels and predictions; "
                "use --task classification for classes"
            )
        return regression_metrics(labels, predictions, notes)
    labels = rows.column("label").to_numpy(zero_copy_only=False).astype(str)
    predictions = rows.column("prediction").to_numpy(zero_copy_only=False).astype(str)
    proba = _proba(rows.column("proba"), len(info.proba_columns), notes)
    classes = _proba_classes(info.proba_columns, np.concatenate([labels, predictions]))
    return classification_metrics(labels, predictions, proba, classes, notes)


def _proba_classes(columns: tuple[str, ...], seen: np.ndarray) -> tuple[str, ...]:
    """The class of each `proba_<class>` column: the class seen whose column name it is
    (`proba_not_spam` is "not spam"), else the name's own suffix."""
    from thresher.models.outputs import proba_names

    observed = [str(c) for c in np.unique(seen)]
    by_column = dict(zip(proba_names(observed), observed, strict=True))
    return tuple(by_column.get(c, c.removeprefix("proba_")) for c in columns)


def _proba(text: pa.ChunkedArray, classes: int, notes: list[str]) -> np.ndarray | None:
    if classes == 0:
        return None
    if text.null_count:
        notes.append("roc_auc, log_loss, calibration: some joined rows have no probabilities")
        return None
    values = pc.list_flatten(pc.split_pattern(text, ",")).cast(pa.float64())
    return np.asarray(values.to_numpy(zero_copy_only=False)).reshape(-1, classes)


def _numbers(text: pa.ChunkedArray) -> np.ndarray | None:
    try:
        return np.asarray(text.cast(pa.float64()).to_numpy())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _joined_rows(store: Store, job_id: str) -> pa.Table:
    pieces = list(store.actuals.rows(job_id))
    if not pieces:
        empty = pa.array([], pa.string())
        return pa.table({"label": empty, "prediction": empty, "proba": empty})
    return pa.concat_tables(pieces)


def _rows_out(store: Store, job: JobRecord) -> int:
    manifest = job.manifest or {}
    return int(manifest.get("rows_out", store.totals(job.id).rows_out))
