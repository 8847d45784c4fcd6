"""`thresher report JOB -o report.html`: the job's monitoring report, one self-contained
HTML file (see `thresher.monitor.report.build`)."""

from __future__ import annotations

from pathlib import Path

import click

from thresher.cli.options import EXIT_FAILED, fail, with_store

__all__ = ["report"]


@click.command()
@click.argument("job_id")
@click.option(
    "--baseline",
    metavar="JOB|NAME|FILE",
    help="Compare with this job, the newest succeeded job of this name, or a reference"
    " file (default: [monitor] baseline, else the run before of the same name).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="Where the HTML goes.",
)
@with_store
def report(store_url: str | None, job_id: str, baseline: str | None, output: Path) -> None:
    """Write a succeeded job's report: the verdict, drifted columns and quality first, then
    baseline-vs-current distributions per column, PSI by column, the predictions, quality
    over time and the bad records. Charts are inline SVG: no network needed to read it."""
    from thresher.errors import ThresherError
    from thresher.monitor.report.build import build_report
    from thresher.store import StoreError, open_store

    try:
        page = build_report(open_store(store_url), job_id, baseline)
    except (ThresherError, StoreError, ImportError) as exc:
        fail(str(exc), EXIT_FAILED)
    output.write_text(page, encoding="utf-8")
    click.echo(f"wrote {output} ({len(page.encode()) / 1024:.0f} KiB)")
