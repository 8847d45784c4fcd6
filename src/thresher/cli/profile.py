"""`thresher profile JOB`: what a job's inputs and outputs looked like, from the profile
its workers made in the same pass as the predictions."""

from __future__ import annotations

import json
from typing import Any

import click

from thresher.cli.options import EXIT_FAILED, fail, with_store

__all__ = ["profile"]


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
@with_store
def profile(store_url: str | None, job_id: str, as_json: bool) -> None:
    """Show a succeeded job's profile: per column its kind, nulls, range, centre,
    quantiles and most frequent values (and per segment with --json)."""
    from thresher.errors import MonitorError
    from thresher.store import StoreError, open_store

    try:  # MonitorError: a profile of a later version than this thresher reads
        found = open_store(store_url).profiles.of_job(job_id)
    except (StoreError, MonitorError) as exc:
        fail(str(exc), EXIT_FAILED)
    described = found.describe()
    if as_json:
        click.echo(json.dumps(described, indent=2))
        return
    _table(job_id, described)


def _table(job_id: str, described: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"job {job_id}: {described['rows']:,} rows profiled")
    for heading in ("column", "role", "kind", "nulls", "min", "p50", "max", "mean", "top"):
        table.add_column(heading, justify="left" if heading in ("column", "top") else "right")
    for name, c in described["columns"].items():
        middle = c.get("quantiles", {}).get("p50")
        top = ", ".join(f"{t['value']} ({t['count']:,})" for t in c.get("top", [])[:3])
        low, high, mean = (c.get(k, c.get(f"length_{k}")) for k in ("min", "max", "mean"))
        table.add_row(
            name, c["role"], c["kind"], f"{c['nulls']:,}",
            *(_number(v) for v in (low, middle, high, mean)), top,
        )  # fmt: skip
    Console().print(table)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
