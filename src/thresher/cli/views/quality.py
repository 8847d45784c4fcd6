"""`thresher quality` for a person: one job's counts, lag, metrics and calibration bins,
or the trend across the jobs of a name as one table, a row per job (oldest first).
Names come from job specs, so they are shown as plain text (`status.shown`)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from thresher.cli.views.status import shown
from thresher.monitor.metrics import ClassificationMetrics, RegressionMetrics
from thresher.monitor.quality import Lag, Quality, QualityTrend

CLASSIFICATION = ("accuracy", "precision", "recall", "f1", "roc_auc", "log_loss")
REGRESSION = ("mae", "rmse", "r2")


def show_quality(result: Quality | QualityTrend, console: Console | None = None) -> None:
    console = console or Console(width=160)
    if isinstance(result, QualityTrend):
        _show_trend(result, console)
    else:
        _show_job(result, console)


def _show_job(q: Quality, console: Console) -> None:
    def say(text: str) -> None:
        console.print(shown(text), highlight=False)

    say(f"job {q.job_id} ({q.name}), finished {_when(q.finished_at)}")
    say(f"labelled {_coverage(q)}; {q.parts} parts, {q.unknown:,} unknown ids, "
        f"{q.repeated:,} repeated")  # fmt: skip
    if q.lag is not None:
        say(f"label lag: first {_span(q.lag.first)}, median {_span(q.lag.median)}, "
            f"last {_span(q.lag.last)} after the job finished")  # fmt: skip
    if q.metrics is None:
        say("no actuals yet: thresher actuals add JOB FILE --label-column …")
        return
    say(f"task: {q.task}{_averaging(q.metrics)}")
    names = CLASSIFICATION if isinstance(q.metrics, ClassificationMetrics) else REGRESSION
    table = Table("metric", "value")
    for name in names:
        table.add_row(name, _number(getattr(q.metrics, name)))
    console.print(table)
    if isinstance(q.metrics, ClassificationMetrics) and q.metrics.calibration:
        bins = Table("predicted probability", "mean predicted", "observed", "rows",
                     title="calibration")  # fmt: skip
        for b in q.metrics.calibration:
            bins.add_row(f"({b.lower:.1f}, {b.upper:.1f}]", _number(b.mean_predicted),
                         _number(b.observed), f"{b.count:,}")  # fmt: skip
        console.print(bins)
    for note in q.notes:
        say(f"note: {note}")


def _show_trend(trend: QualityTrend, console: Console) -> None:
    names: list[str] = []
    for kind, metrics in ((ClassificationMetrics, CLASSIFICATION), (RegressionMetrics, REGRESSION)):
        if any(isinstance(q.metrics, kind) for q in trend.jobs):
            names += metrics
    table = Table("job", "finished", "labelled", "coverage", "median lag", *names,
                  title=f"quality of {trend.name}, oldest first")  # fmt: skip
    for q in trend.jobs:
        values = [_number(getattr(q.metrics, n, None)) for n in names]
        table.add_row(
            shown(q.job_id),
            _when(q.finished_at),
            f"{q.labelled:,}",
            "" if q.coverage is None else f"{q.coverage:.1%}",
            _span(q.lag.median) if isinstance(q.lag, Lag) else "",
            *values,
        )
    console.print(table)


def _averaging(metrics: ClassificationMetrics | RegressionMetrics) -> str:
    if not isinstance(metrics, ClassificationMetrics):
        return ""
    if metrics.average == "binary":
        return f" (binary: precision, recall, F1 of the positive class {metrics.positive!r})"
    return f" ({len(metrics.classes)} classes: precision, recall, F1 and ROC AUC macro-averaged)"


def _coverage(q: Quality) -> str:
    share = "" if q.coverage is None else f" ({q.coverage:.1%})"
    return f"{q.labelled:,} of {q.predicted:,} predicted ids{share}"


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _when(moment: str | None) -> str:
    return "—" if moment is None else moment[:19].replace("T", " ")


def _span(seconds: float) -> str:
    """`3d 4h`, `2h 5m`, `4m 10s`, `12s`."""
    whole = round(seconds)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"
