"""The `thresher` command line. Exit codes: 0 done, 1 job failed, 2 bad usage or spec."""

from __future__ import annotations

import faulthandler
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from thresher.allocator import use_jemalloc
from thresher.drift_cli import drift
from thresher.errors import SpecError, ThresherError
from thresher.leaving import ended, leave_when_done
from thresher.profile_cli import profile
from thresher.quality_cli import actuals, quality
from thresher.report_cli import report
from thresher.schedule_cli import schedules
from thresher.trigger_cli import triggers

if TYPE_CHECKING:
    from thresher.store import Store

EXIT_FAILED = 1
EXIT_USAGE = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="thresher")
@click.option(
    "--store",
    envvar="THRESHER_STORE",
    metavar="URL",
    help="Job store: sqlite:///path.db or postgresql://… "
    "[env THRESHER_STORE; default ~/.local/share/thresher/store.db]",
)
@click.pass_context
def cli(ctx: click.Context, store: str | None) -> None:
    """thresher: batch inference, exactly once per record.

    Run a model over every record of a dataset and write the predictions to files or a
    database. Start with `thresher demo`, then `thresher run JOB.toml`.
    """
    ctx.obj = store


@cli.command()
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override a spec value, e.g. --set batch.size=1024 (repeatable).",
)
@click.pass_obj
def run(store_url: str | None, spec_file: Path, overrides: tuple[str, ...]) -> None:
    """Run the job that SPEC_FILE (TOML, YAML or JSON) describes."""
    from thresher.coordinator.job import run_job
    from thresher.notify import check_notify
    from thresher.progress import reporter_for
    from thresher.spec import load_spec
    from thresher.store import open_store

    try:
        spec = load_spec(spec_file, overrides)
        check_notify(spec)
        store = open_store(store_url)
        result = run_job(spec, store, reporter_for(sys.stderr))
    except SpecError as exc:
        _fail(str(exc), EXIT_USAGE)
    except ThresherError as exc:
        _fail(f"job failed ({exc.context}): {exc}", EXIT_FAILED)
    _report(result, store)


@cli.command()
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Resume even if the job looks owned by a live process.")
@click.pass_obj
def resume(store_url: str | None, job_id: str, force: bool) -> None:
    """Finish a stopped job from its stored plan: done shards are kept, the rest rerun."""
    from thresher.coordinator.job import resume_job
    from thresher.progress import reporter_for
    from thresher.store import open_store

    try:
        store = open_store(store_url)
        result = resume_job(job_id, store, reporter_for(sys.stderr), force=force)
    except ThresherError as exc:
        _fail(f"cannot resume ({exc.context}): {exc}", EXIT_FAILED)
    _report(result, store)


@cli.command()
@click.argument("job_id", required=False)
@click.option("--limit", default=20, show_default=True, help="Jobs to list.")
@click.pass_obj
def status(store_url: str | None, job_id: str | None, limit: int) -> None:
    """List recent jobs, or show one job's shards, rows, errors and rate."""
    from thresher.status import show_job, show_jobs
    from thresher.store import open_store

    try:
        store = open_store(store_url)
        show_job(store, job_id) if job_id else show_jobs(store, limit)
    except ThresherError as exc:
        _fail(str(exc), EXIT_FAILED)


@cli.command()
@click.argument("job_id")
@click.pass_obj
def cancel(store_url: str | None, job_id: str) -> None:
    """Stop a running job; its coordinator stops within a second. Resume continues it."""
    from thresher.store import open_store

    try:
        state = open_store(store_url).request_cancel(job_id)
    except ThresherError as exc:
        _fail(str(exc), EXIT_FAILED)
    click.echo(f"job {job_id}: {state.value}")


@cli.command()
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE")
@click.option("--sizes", help="Comma-separated batch sizes (default: 16 up to batch.max_size).")
@click.pass_obj
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
        rows = swept.rows
    except SpecError as exc:
        _fail(str(exc), EXIT_USAGE)
    except (ThresherError, ValueError) as exc:
        _fail(f"tune failed: {exc}", EXIT_FAILED)
    table = Table("batch size", "rows/s", "latency/batch (ms)", "peak memory (MiB)")
    for row in rows:
        table.add_row(
            f"{row.batch_size:,}",
            f"{row.rows_per_second:,.0f}",
            f"{row.latency_ms:,.2f}",
            f"{row.peak_rss_mib:,.0f}",
        )
    click.echo(f"measured as the job runs: {swept.placement.describe()}")
    Console().print(table)
    best = recommend(rows)
    click.echo(f"recommended: batch.size = {best.batch_size} ({best.rows_per_second:,.0f} rows/s)")


@cli.command("retry-errors")
@click.argument("job_id")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="model.KEY=VALUE",
    help="Change the model for the retry, e.g. --set model.uri=fixed.skops (repeatable).",
)
@click.pass_obj
def retry_errors(store_url: str | None, job_id: str, overrides: tuple[str, ...]) -> None:
    """Run a finished job's failed rows again (rows the model rejected), adding the ones
    that now succeed to the output and keeping the rest in the error file."""
    from thresher.coordinator.retry import retry_errors as retry
    from thresher.progress import reporter_for
    from thresher.store import open_store

    try:
        result = retry(job_id, open_store(store_url), overrides, reporter_for(sys.stderr))
    except SpecError as exc:
        _fail(str(exc), EXIT_USAGE)
    except ThresherError as exc:
        _fail(f"cannot retry: {exc}", EXIT_FAILED)
    _report(result)


@cli.command()
@click.option("--rows", default=1_000_000, show_default=True, help="Customers to generate.")
@click.option(
    "--dir",
    "directory",
    default="thresher-demo",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the data, model, spec and results go.",
)
@click.pass_obj
def demo(store_url: str | None, rows: int, directory: Path) -> None:
    """Score a synthetic credit table end to end, offline: data, model, spec, results."""
    from thresher.demo import run_demo
    from thresher.store import open_store

    try:
        ok = run_demo(directory, rows, open_store(store_url))
    except ThresherError as exc:
        _fail(f"demo failed: {exc}", EXIT_FAILED)
    if not ok:
        sys.exit(EXIT_FAILED)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The server's TOML config: data_dir, models, allowed_roots, limits.",
)
@click.option("--store", "own_store", metavar="URL", help="The job store (as `thresher --store`).")
@click.pass_obj
def serve(
    store_url: str | None, host: str, port: int, config_file: Path | None, own_store: str | None
) -> None:
    """Run the HTTP service: upload files, submit and poll jobs, download results."""
    try:
        from thresher.service.app import build_state
        from thresher.service.app import serve as run_server
        from thresher.service.config import ConfigError
    except ImportError as exc:
        _fail(f"the service needs `pip install 'thresher[service]'` ({exc})", EXIT_USAGE)
    try:
        state = build_state(own_store or store_url, config_file)
    except ConfigError as exc:
        _fail(str(exc), EXIT_USAGE)
    except ThresherError as exc:
        _fail(str(exc), EXIT_FAILED)
    run_server(state, host, port)


@cli.group()
def token() -> None:
    """Bearer tokens for the HTTP service, one tenant each."""


@token.command("create")
@click.option("--tenant", required=True, help="The tenant the token acts for.")
@click.option("--store", "own_store", metavar="URL", help="The job store (as `thresher --store`).")
@click.pass_obj
def token_create(store_url: str | None, tenant: str, own_store: str | None) -> None:
    """Make a token for TENANT and print it (only this once: the store keeps its hash)."""
    from thresher.store import open_store

    try:
        from thresher.service.policies.auth import create_token
    except ImportError as exc:
        _fail(f"the service needs `pip install 'thresher[service]'` ({exc})", EXIT_USAGE)
    try:
        click.echo(create_token(open_store(own_store or store_url), tenant))
    except (ThresherError, ValueError) as exc:
        _fail(str(exc), EXIT_USAGE)


@token.command("list")
@click.option("--store", "own_store", metavar="URL", help="The job store (as `thresher --store`).")
@click.pass_obj
def token_list(store_url: str | None, own_store: str | None) -> None:
    """Show every token's tenant, creation time and fingerprint (never the token)."""
    from thresher.service.policies.auth import list_tokens
    from thresher.status import shown
    from thresher.store import open_store

    try:
        tokens = list_tokens(open_store(own_store or store_url))
    except ThresherError as exc:
        _fail(str(exc), EXIT_FAILED)
    for info in tokens:
        click.echo(
            f"{info.fingerprint}  {info.created_at[:19].replace('T', ' ')}  {shown(info.tenant)}"
        )


@token.command("revoke")
@click.argument("fingerprint")
@click.option("--store", "own_store", metavar="URL", help="The job store (as `thresher --store`).")
@click.pass_obj
def token_revoke(store_url: str | None, fingerprint: str, own_store: str | None) -> None:
    """Revoke the token with FINGERPRINT (from `thresher token list`): from now on it
    answers 401."""
    from thresher.service.policies.auth import revoke_token
    from thresher.status import shown
    from thresher.store import open_store

    try:
        info = revoke_token(open_store(own_store or store_url), fingerprint)
    except (ThresherError, ValueError) as exc:
        _fail(str(exc), EXIT_USAGE)
    click.echo(f"revoked {info.fingerprint} of tenant {shown(info.tenant)}")


def _report(result: object, store: Store | None = None) -> None:
    """Print how the job ended (after sending its webhooks, when `store` is given: a
    job that ended here is told downstream as the service would)."""
    from thresher.coordinator.job import JobResult
    from thresher.notify import notify_job_end
    from thresher.store import JobState
    from thresher.summary import print_result

    assert isinstance(result, JobResult)
    if store is not None and result.state in (JobState.SUCCEEDED, JobState.FAILED):
        notify_job_end(store, result.job_id, lambda line: click.echo(line, err=True))
    print_result(result)
    if not result.succeeded:
        sys.exit(EXIT_FAILED)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"thresher: {message}", err=True)
    sys.exit(code)


cli.add_command(profile)
cli.add_command(report)
cli.add_command(schedules)
cli.add_command(triggers)
cli.add_command(drift)
cli.add_command(actuals)
cli.add_command(quality)


def main() -> None:
    """Console entry point. A crash in native code (a reader, a model library) prints
    where Python was, instead of a bare exit 139; a command that ended leaves without
    tearing the interpreter down (thresher/leaving.py)."""
    faulthandler.enable()
    use_jemalloc()  # before pyarrow is imported (thresher/allocator.py)
    leave_when_done()
    try:
        cli(prog_name="thresher")  # click's standalone mode always ends in SystemExit
    except SystemExit as exc:
        ended(exc.code)
        raise
