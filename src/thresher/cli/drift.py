"""`thresher drift BASELINE CURRENT`: has the current job's data moved away from the
baseline's? Job ids, job names (the newest succeeded job of that name) or a reference
file (profiled once, then cached in the store). Exit 1 with `--fail-on-drift` when the
job verdict is "drift", for pipelines; 2 when a side cannot be found."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from thresher.cli.options import EXIT_FAILED, EXIT_USAGE, fail, with_store

if TYPE_CHECKING:
    from thresher.monitor.drift_report import ColumnDrift, DriftReport

__all__ = ["drift"]

STYLES = {"ok": "green", "warn": "yellow", "drift": "bold red"}


@click.command()
@click.argument("baseline")
@click.argument("current")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--fail-on-drift", is_flag=True, help="Exit 1 when the verdict is drift (for pipelines)."
)
@click.option(
    "--columns",
    multiple=True,
    metavar="NAME[,NAME…]",
    help="Compare only these columns (repeatable, or comma-separated).",
)
@with_store
def drift(
    store_url: str | None,
    *,
    baseline: str,
    current: str,
    as_json: bool,
    fail_on_drift: bool,
    columns: tuple[str, ...],
) -> None:
    """Compare CURRENT with BASELINE column by column: PSI on the baseline's frozen
    deciles, Jensen-Shannon (base 2), Wasserstein (/ baseline std), KS with its error
    bound, chi-square for categories; verdicts by [monitor] psi_warn / psi_drift."""
    from thresher.errors import ThresherError
    from thresher.monitor.subjects import drift_of
    from thresher.store import open_store

    wanted = [n.strip() for group in columns for n in group.split(",") if n.strip()] or None
    try:
        report = drift_of(open_store(store_url), baseline, current, wanted)
    except ThresherError as exc:
        fail(str(exc), EXIT_USAGE)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        show(report)
    if fail_on_drift and report.verdict == "drift":
        sys.exit(EXIT_FAILED)  # the check failed: a pipeline stops here


def show(report: DriftReport) -> None:
    """The report as a table (and the class shares, segments, and columns on one side)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 140)
    console.print(f"baseline {escape(report.baseline)} ({report.rows.baseline:,} rows)")
    console.print(f"current  {escape(report.current)} ({report.rows.current:,} rows)")
    table = Table("column", "kind", "PSI", "JS", "Wasserstein", "KS ± bound", "p adj.", "verdict")
    for column in report.columns:
        table.add_row(*_cells(column))
    console.print(table)
    for name, shares in report.class_shares.items():
        parts = ", ".join(f"{s.label} {s.baseline:.1%} → {s.current:.1%}" for s in shares)
        console.print(escape(f"class shares of {name}: {parts}"))
    for segment in report.segments:
        share = f"{segment.row_share.baseline:.1%} → {segment.row_share.current:.1%} of rows"
        key = escape(f"{report.segment_by}={segment.key}")
        console.print(f"segment {key}: {share}, {segment.verdict or 'on one side only'}")
    if report.added or report.removed:
        added, removed = ", ".join(report.added) or "-", ", ".join(report.removed) or "-"
        console.print(escape(f"added: {added}; removed: {removed}"))
    t = report.thresholds
    verdict = f"[{STYLES[report.verdict]}]{report.verdict}[/]"
    console.print(f"verdict: {verdict} (PSI warn {t.psi_warn:g}, drift {t.psi_drift:g})")


def _cells(column: ColumnDrift) -> list[str]:
    from rich.markup import escape

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    ks = "-" if column.ks is None else f"{column.ks:.4f} ± {column.ks_bound or 0:.4f}"
    kind = column.kind if column.measure != "lengths" else "text (lengths)"
    verdict = f"[{STYLES[column.verdict]}]{column.verdict}[/]"
    if column.note:
        verdict += escape(f" ({column.note})")
    return [
        escape(column.name),
        kind,
        number(column.psi),
        number(column.js),
        number(column.wasserstein),
        ks,
        "-" if column.p_adjusted is None else f"{column.p_adjusted:.3g}",
        verdict,
    ]
