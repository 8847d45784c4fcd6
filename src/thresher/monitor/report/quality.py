"""The report's quality part, once actuals have arrived: the job's metrics, coverage and
label lag, and the trend of its headline metric over the jobs of its name."""

from __future__ import annotations

from dataclasses import asdict

from thresher.errors import ThresherError
from thresher.monitor.metrics import ClassificationMetrics
from thresher.monitor.quality import Quality, job_quality, quality_trend
from thresher.monitor.report import charts
from thresher.store import JobRecord, Store

__all__ = ["quality_part"]

SHOWN = ("accuracy", "precision", "recall", "f1", "roc_auc", "log_loss", "mae", "rmse", "r2")


def quality_part(store: Store, job: JobRecord) -> tuple[list[tuple[str, str]], str | None]:
    """(metric, value) rows and the trend chart; nothing while no label has arrived."""
    if not store.actuals.parts(job.id):
        return [], None
    found = job_quality(store, job.id)
    rows = _rows(found)
    try:
        trend = quality_trend(store, job.name).jobs
    except ThresherError:
        trend = ()
    return rows, _trend_chart(trend, found)


def _rows(found: Quality) -> list[tuple[str, str]]:
    rows = [
        ("labelled rows", f"{found.labelled:,} of {found.predicted:,}"),
        ("coverage", f"{found.coverage:.1%}" if found.coverage is not None else "—"),
        ("unknown ids", f"{found.unknown:,}"),
    ]
    if found.lag is not None:
        rows.append(("label lag (median)", f"{found.lag.median / 3600:.1f} h"))
    if found.metrics is not None:
        values = asdict(found.metrics)
        rows += [(k, f"{values[k]:.4g}") for k in SHOWN if values.get(k) is not None]
    rows += [("note", note) for note in found.notes]
    return rows


def _trend_chart(trend: tuple[Quality, ...], found: Quality) -> str | None:
    with_metrics = [q for q in trend if q.metrics is not None]
    if len(with_metrics) < 2:
        return None
    metric = "accuracy" if isinstance(found.metrics, ClassificationMetrics) else "rmse"
    series = {metric: [asdict(q.metrics).get(metric) for q in with_metrics if q.metrics]}
    labels = [q.job_id for q in with_metrics]
    return charts.lines(labels, series, f"{metric} over the runs of {found.name}")
