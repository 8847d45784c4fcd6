"""`thresher actuals add` (labels that arrive late, joined to a job's predictions by id),
`thresher actuals list`, and `thresher quality` (one job's metrics, or the trend across
the jobs of a name or schedule). Exit codes: 0 done, 2 bad usage or input."""

from __future__ import annotations

import json
from typing import Any

import click

from thresher.cli.options import EXIT_USAGE, fail, store_option, with_store
from thresher.errors import ThresherError

__all__ = ["actuals", "quality"]


@click.group()
@store_option()
def actuals(store: str | None) -> None:
    """Labels for a job's predictions, as they arrive (`thresher actuals add`)."""


@actuals.command("add")
@click.argument("job_id")
@click.argument("file", required=False)
@click.option("--id-column", help="The column of record ids [default: the job's id column].")
@click.option("--label-column", required=True, help="The column of the true outcomes.")
@click.option(
    "--prediction-column",
    help="The output column holding the prediction [default: the job's [monitor]"
    " prediction_column, `prediction`].",
)
@click.option("--query", help="A SQL query that returns the ids and labels (with --from).")
@click.option("--from", "from_url", metavar="URL", help="sqlite:///path.db or postgresql://…")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@with_store
def add(
    store_url: str | None,
    *,
    job_id: str,
    file: str | None,
    id_column: str | None,
    label_column: str,
    prediction_column: str | None,
    query: str | None,
    from_url: str | None,
    as_json: bool,
) -> None:
    """Join the labels in FILE (Parquet, CSV or JSONL, by suffix) — or the rows of
    --query on database --from — to job JOB_ID's predictions by id. Adding the same part
    again changes nothing; an id labelled before keeps its first label (`repeated`); an
    id the job never predicted is counted as `unknown`."""
    from thresher.monitor.actuals import add_actuals, read_part
    from thresher.store import open_store

    data = from_url if query is not None else file
    if (
        data is None
        or (file is not None and query is not None)
        or (query is None) != (from_url is None)
    ):
        fail("give FILE, or --query with --from (not both)", EXIT_USAGE)
    try:
        store = open_store(store_url)
        part = read_part(
            store, job_id, data, label_column=label_column, id_column=id_column, query=query
        )
        added = add_actuals(store, job_id, part, prediction_column)
    except ThresherError as exc:
        fail(str(exc), EXIT_USAGE)
    if as_json:
        click.echo(json.dumps(added.to_json(), indent=2))
        return
    if not added.new:
        click.echo(f"{added.source}: added before, at {added.added_at}; nothing changed")
    else:
        click.echo(
            f"{added.source}: {added.rows_read:,} rows: {added.matched:,} labelled, "
            f"{added.repeated:,} repeated, {added.unknown:,} unknown ids"
        )
        if added.unknown_ids:
            more = ", …" if added.unknown > len(added.unknown_ids) else ""
            click.echo(f"unknown ids: {', '.join(added.unknown_ids)}{more}")
    click.echo(f"job {added.job_id}: {_coverage(added.labelled, added.predicted)}")


@actuals.command("list")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the parts as JSON.")
@with_store
def list_parts(store_url: str | None, job_id: str, as_json: bool) -> None:
    """The parts of actuals added to job JOB_ID, in the order they came."""
    from dataclasses import asdict

    from thresher.store import open_store

    try:
        store = open_store(store_url)
        store.job(job_id)
        parts = store.actuals.parts(job_id)
    except ThresherError as exc:
        fail(str(exc), EXIT_USAGE)
    if as_json:
        click.echo(json.dumps([asdict(p) for p in parts], indent=2))
        return
    for p in parts:
        click.echo(
            f"{p.added_at[:19]}  {p.digest[:12]}  {p.rows_read:,} rows: {p.matched:,} labelled,"
            f" {p.repeated:,} repeated, {p.unknown:,} unknown  {p.source}"
        )


@click.command()
@click.argument("job_or_name")
@click.option(
    "--task",
    type=click.Choice(["classification", "regression"]),
    help="Force the task [default: inferred from the labels and predictions].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@with_store
def quality(store_url: str | None, job_or_name: str, task: Any, as_json: bool) -> None:
    """Quality of job JOB_OR_NAME once actuals arrived — metrics, counts, coverage and
    label lag — or, for a job name or schedule, the trend across its succeeded jobs,
    oldest first."""
    from thresher.cli.views.quality import show_quality
    from thresher.monitor.quality import quality as measure
    from thresher.store import open_store

    try:
        result = measure(open_store(store_url), job_or_name, task)
    except ThresherError as exc:
        fail(str(exc), EXIT_USAGE)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        show_quality(result)


def _coverage(labelled: int, predicted: int) -> str:
    share = f" ({labelled / predicted:.1%})" if predicted else ""
    return f"{labelled:,} of {predicted:,} predicted ids labelled{share}"
