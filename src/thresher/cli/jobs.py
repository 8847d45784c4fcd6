"""The job commands: `thresher run`, `resume`, `status`, `cancel`, `tune` and
`retry-errors`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from thresher.cli.options import EXIT_FAILED, EXIT_USAGE, fail, with_store
from thresher.errors import SourceError, SpecError, ThresherError

if TYPE_CHECKING:
    from thresher.cli.views.events import EventReporter
    from thresher.coordinator.job import JobResult
    from thresher.store import Store

__all__ = ["cancel", "resume", "retry_errors", "run", "status", "tune"]

SPEC_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command()
@click.argument("spec_file", type=SPEC_FILE)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override a spec value, e.g. --set batch.size=1024 (repeatable).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the job's start and end as JSON lines on stdout (the log goes to stderr).",
)
@with_store
def run(store_url: str | None, spec_file: Path, overrides: tuple[str, ...], as_json: bool) -> None:
    """Run the job that SPEC_FILE (TOML, YAML or JSON) describes."""
    from thresher.cli.views.events import EventReporter, event_stream
    from thresher.coordinator.job import run_job
    from thresher.coordinator.progress import reporter_for
    from thresher.notify import check_notify
    from thresher.spec import load_spec
    from thresher.store import open_store

    events = EventReporter(reporter_for(sys.stderr), event_stream()) if as_json else None
    try:
        spec = load_spec(spec_file, overrides)
        check_notify(spec)
        store = open_store(store_url)
        result = run_job(spec, store, events or reporter_for(sys.stderr))
    except SpecError as exc:
        if events is not None:
            events.stopped(exc.problems)
        fail(str(exc), EXIT_USAGE)
    except ThresherError as exc:
        if events is not None:
            events.stopped([f"{exc.context}: {exc}"])
        # An input that cannot be found or planned is met before the job is recorded:
        # a bad spec (2), as `thresher validate` says, not a job that failed (1).
        if isinstance(exc, SourceError):
            fail(f"invalid job ({exc.context}): {exc}", EXIT_USAGE)
        fail(f"job failed ({exc.context}): {exc}", EXIT_FAILED)
    ended(result, store, events)


@click.command()
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Resume even if the job looks owned by a live process.")
@with_store
def resume(store_url: str | None, job_id: str, force: bool) -> None:
    """Finish a stopped job from its stored plan: done shards are kept, the rest rerun."""
    from thresher.coordinator.job import resume_job
    from thresher.coordinator.progress import reporter_for
    from thresher.store import open_store

    try:
        store = open_store(store_url)
        result = resume_job(job_id, store, reporter_for(sys.stderr), force=force)
    except ThresherError as exc:
        fail(f"cannot resume ({exc.context}): {exc}", EXIT_FAILED)
    ended(result, store)


@click.command()
@click.argument("job_id", required=False)
@click.option("--limit", default=20, show_default=True, help="Jobs to list.")
@click.option("--json", "as_json", is_flag=True, help="Print the job, or the jobs, as JSON.")
@with_store
def status(store_url: str | None, job_id: str | None, limit: int, as_json: bool) -> None:
    """List recent jobs, or show one job's shards, rows, errors and rate."""
    from thresher.cli.views.status import job_json, jobs_json, show_job, show_jobs
    from thresher.store import open_store

    try:
        store = open_store(store_url)
        if as_json:
            found = job_json(store, job_id) if job_id else jobs_json(store, limit)
            click.echo(json.dumps(found, indent=2))
        else:
            show_job(store, job_id) if job_id else show_jobs(store, limit)
    except ThresherError as exc:
        fail(str(exc), EXIT_FAILED)


@click.command()
@click.argument("job_id")
@with_store
def cancel(store_url: str | None, job_id: str) -> None:
    """Stop a running job; its coordinator stops within a second. Resume continues it."""
    from thresher.store import open_store

    try:
        state = open_store(store_url).request_cancel(job_id)
    except ThresherError as exc:
        fail(str(exc), EXIT_FAILED)
    click.echo(f"job {job_id}: {state.value}")


@click.command()
@click.argument("spec_file", type=SPEC_FILE)
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE")
@click.option("--sizes", help="Comma-separated batch sizes (default: 16 up to batch.max_size).")
@with_store
def tune(
    store_url: str | None, spec_file: Path, overrides: tuple[str, ...], sizes: str | None
) -> None:
    """Sweep batch sizes on a sample of the job's input: rows/s, latency, memory, with
    the threads the job's workers would have."""
    from rich.console import Console
    from rich.table import Table

    from thresher.plan.tune import recommend, sweep
    from thresher.spec import load_spec
    from thresher.store import open_store

    try:
        spec = load_spec(spec_file, overrides)
        chosen = [int(s) for s in sizes.split(",")] if sizes else None
        swept = sweep(spec, chosen, open_store(store_url))
    except SpecError as exc:
        fail(str(exc), EXIT_USAGE)
    except SourceError as exc:  # an input not there: the spec's fault, as in `run`
        fail(f"invalid job ({exc.context}): {exc}", EXIT_USAGE)
    except (ThresherError, ValueError) as exc:
        fail(f"tune failed: {exc}", EXIT_FAILED)
    table = Table("batch size", "rows/s", "latency/batch (ms)", "peak memory (MiB)")
    for row in swept.rows:
        table.add_row(
            f"{row.batch_size:,}",
            f"{row.rows_per_second:,.0f}",
            f"{row.latency_ms:,.2f}",
            f"{row.peak_rss_mib:,.0f}",
        )
    click.echo(f"measured as the job runs: {swept.placement.describe()}")
    Console().print(table)
    best = recommend(swept.rows)
    click.echo(f"recommended: batch.size = {best.batch_size} ({best.rows_per_second:,.0f} rows/s)")


@click.command("retry-errors")
@click.argument("job_id")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="model.KEY=VALUE",
    help="Change the model for the retry, e.g. --set model.uri=fixed.skops (repeatable).",
)
@with_store
def retry_errors(store_url: str | None, job_id: str, overrides: tuple[str, ...]) -> None:
    """Run a finished job's failed rows again (rows the model rejected), adding the ones
    that now succeed to the output and keeping the rest in the error file."""
    from thresher.coordinator.progress import reporter_for
    from thresher.coordinator.retry import retry_errors as retry
    from thresher.store import open_store

    try:
        result = retry(job_id, open_store(store_url), overrides, reporter_for(sys.stderr))
    except SpecError as exc:
        fail(str(exc), EXIT_USAGE)
    except ThresherError as exc:
        fail(f"cannot retry: {exc}", EXIT_FAILED)
    ended(result)


def ended(
    result: JobResult, store: Store | None = None, events: EventReporter | None = None
) -> None:
    """Print how the job ended (after sending its webhooks, when `store` is given: a
    job that ended here is told downstream as the service would): as the `ended` event
    on `events` (`run --json`), else for a person; exit 1 if it failed."""
    from thresher.cli.views.summary import print_result
    from thresher.notify import notify_job_end
    from thresher.store import JobState

    if store is not None and result.state in (JobState.SUCCEEDED, JobState.FAILED):
        notify_job_end(store, result.job_id, lambda line: click.echo(line, err=True))
    if events is not None:
        events.ended(result)
    else:
        print_result(result)
    if not result.succeeded:
        sys.exit(EXIT_FAILED)
