"""The end-of-job summary a person reads."""

from __future__ import annotations

import click

from thresher.coordinator.job import JobResult
from thresher.postgres import without_password
from thresher.store import JobState


def print_result(result: JobResult) -> None:
    """Counts, rate and where things are; on failure, each problem on its own line."""
    m = result.manifest
    state = "succeeded" if result.succeeded else "FAILED"
    state = "HELD" if result.state == JobState.HELD else state
    rate = m["rows_per_second"] or 0
    click.echo(
        f"job {result.job_id} {state}: {m['rows_in']:,} rows in, {m['rows_out']:,} out, "
        f"{m['rows_error']:,} errors in {m['seconds']:.1f}s ({rate:,.0f} rows/s)"
    )
    click.echo(f"  output: {without_password(result.output)}")
    if m.get("delta_version") is not None:  # a table sink's new version (sinks/delta.py)
        click.echo(f"  table version: {m['delta_version']}")
    if m.get("iceberg_snapshot_id") is not None:  # and an Iceberg one's (sinks/iceberg.py)
        click.echo(f"  table snapshot: {m['iceberg_snapshot_id']}")
    if m["rows_error"]:
        click.echo(f"  errors: {result.errors_uri}")
    for problem in result.problems:
        click.echo(f"  problem: {problem}", err=True)
    if result.state == JobState.HELD:  # a publish check failed (coordinator/gate.py)
        click.echo("  held: its output waits, staged; the previous output stays live.")
        click.echo(f"  `thresher approve {result.job_id}` publishes it, `thresher reject` drops it")
