"""`thresher report JOB`: a job's profile, its drift against a baseline, its quality and its
bad records, gathered into one self-contained HTML page (`page.render`).

The baseline is `--baseline` (a job id, a job name, or a reference file), else the job's
`[monitor] baseline`, else the newest earlier succeeded job of the same name (as alerts
choose it); a job without one is reported alone: its distributions, no verdicts. Only the
stored profiles, actuals and the error file are read, never the data, so the page's size
and cost do not grow with rows."""

from __future__ import annotations

import numpy as np

from thresher.monitor.alerts import job_drift
from thresher.monitor.drift_columns import bin_labels, category_counts
from thresher.monitor.drift_report import ColumnDrift, DriftReport
from thresher.monitor.drift_stats import bin_shares
from thresher.monitor.report import charts
from thresher.monitor.report.errors import ErrorSummary, summarise_errors
from thresher.monitor.report.page import ColumnView, ReportPage, render
from thresher.monitor.report.quality import quality_part
from thresher.profiles.profile import PROBABILITY_BINS, ColumnProfile, Profile
from thresher.sinks import open_sink
from thresher.store import JobRecord, Store

__all__ = ["build_report", "psi_chart"]

HISTOGRAM_BINS = 10
HEADLINE_QUALITY = ("coverage", "accuracy", "roc_auc", "rmse", "r2")
MAX_CATEGORIES = 12


def build_report(store: Store, job_id: str, baseline: str | None = None) -> str:
    """The report page of job `job_id` (against `baseline`, see the module docstring)."""
    job = store.job(job_id)
    profile = store.profiles.of_job(job_id)
    drift = job_drift(store, job, baseline)
    page = ReportPage(
        title=f"thresher report: {job.name} {job.id}",
        meta=_meta(job, profile, drift),
        verdict=drift.verdict if drift else "none",
        headline=_headline(job, profile, drift),
        drifted=drift.drifted if drift else [],
        errors=_errors(job),
    )
    views = _views(profile, drift)
    page.columns = [v for v in views if v.role == "input"]
    page.outputs = [v for v in views if v.role == "output"]
    if drift is not None and any(c.psi is not None for c in drift.columns):
        page.psi_chart = psi_chart(drift)
    page.quality, page.quality_chart = quality_part(store, job)
    page.headline += [(k, v) for k, v in page.quality if k in HEADLINE_QUALITY]
    return render(page)


def _meta(job: JobRecord, profile: Profile, drift: DriftReport | None) -> list[str]:
    against = f"compared with {drift.baseline}" if drift else "no baseline to compare with"
    return [
        f"finished {job.finished_at or '—'}; {profile.rows:,} rows profiled; {against}",
        "PSI on the baseline's frozen deciles: warn at"
        f" {job.spec.monitor.psi_warn:g}, drift at {job.spec.monitor.psi_drift:g}.",
    ]


def _headline(job: JobRecord, profile: Profile, drift: DriftReport | None) -> list[tuple[str, str]]:
    manifest = job.manifest or {}
    cards = [
        ("rows in", f"{manifest.get('rows_in', profile.rows):,}"),
        ("bad records", f"{manifest.get('rows_error', 0):,}"),
        ("columns", f"{len(profile.inputs())} in, {len(profile.outputs())} out"),
    ]
    if drift is not None:
        cards.append(("drifted columns", f"{len(drift.drifted)} of {len(drift.columns)}"))
    return cards


def _views(profile: Profile, drift: DriftReport | None) -> list[ColumnView]:
    compared = {c.name: c for c in drift.columns} if drift else {}
    views = []
    for name, column in profile.columns.items():
        found = compared.get(name)
        if found is not None and found.shares:
            views.append(_compared_view(column, found))
        else:
            views.append(_alone_view(column))
    return views


def _compared_view(column: ColumnProfile, drift: ColumnDrift) -> ColumnView:
    shares = drift.shares[: MAX_CATEGORIES + 1]
    chart = charts.grouped_bars(
        [s.label for s in shares],
        {"baseline": [s.baseline for s in shares], "current": [s.current for s in shares]},
        f"{column.name}{' (lengths)' if drift.measure == 'lengths' else ''}",
    )
    figures = {"PSI": drift.psi, "JS": drift.js, "KS": drift.ks, "L∞": drift.linf}
    figures["p adj."] = drift.p_adjusted
    return ColumnView(column.name, column.role, column.kind, drift.verdict, figures, chart)


def _alone_view(column: ColumnProfile) -> ColumnView:
    """A column with nothing to compare with: its own distribution."""
    m = column.moments
    figures: dict[str, float | None] = {"nulls": float(column.nulls)}
    if m.count:
        figures |= {"min": m.min, "mean": m.mean, "max": m.max}
    labels, values = _distribution(column)
    chart = charts.grouped_bars(labels, {"current": values}, column.name) if labels else ""
    return ColumnView(column.name, column.role, column.kind, "none", figures, chart)


def _distribution(column: ColumnProfile) -> tuple[list[str], list[float]]:
    if column.kind == "categorical":
        counts = sorted(category_counts(column).items(), key=lambda kv: -kv[1])
        total = sum(n for _, n in counts) or 1.0
        top = counts[:MAX_CATEGORIES]
        return [k for k, _ in top], [n / total for _, n in top]
    seen = int(np.sum(column.probability)) if column.probability is not None else 0
    if column.probability is not None and seen:
        step = 1 / PROBABILITY_BINS
        labels = [f"{i * step:.2f}" for i in range(PROBABILITY_BINS)]
        return labels, [n / seen for n in column.probability]
    sketch = column.quantiles
    if sketch is None or sketch.is_empty():
        return [], []
    low, high = sketch.get_quantiles([0.01, 0.99])
    edges = sorted(set(np.linspace(low, high, HISTOGRAM_BINS + 1)[1:-1].tolist()))
    return bin_labels(edges), bin_shares(sketch, edges).tolist()


def psi_chart(drift: DriftReport) -> str:
    """The PSI of each column, highest first, against the warn and drift lines (the
    report's and the dashboard's)."""
    ranked = sorted((c for c in drift.columns if c.psi is not None), key=lambda c: -(c.psi or 0))
    t = drift.thresholds
    return charts.bars(
        [c.name for c in ranked],
        [c.psi or 0.0 for c in ranked],
        "PSI by column (baseline deciles, frozen)",
        [(t.psi_warn, "warn"), (t.psi_drift, "drift")],
        "PSI",
    )


def _errors(job: JobRecord) -> ErrorSummary | None:
    try:
        return summarise_errors(open_sink(job.spec.sink).read_errors())
    except Exception:  # an error file that cannot be read must not cost the whole report
        return None
