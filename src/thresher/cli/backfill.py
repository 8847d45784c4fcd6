"""`thresher backfill`: run a schedule's past fire times, each once, below its live ticks.

Like `thresher schedules`, it works on the store the server uses, with the server's
config (which declares the config's schedules): the backfill it records is started by
the running server within moments (by the next one to start, if none runs), and shown
here from the tick ledger and the jobs.

    thresher backfill nightly --from 2026-11-01 --to 2026-11-30 --config server.toml
    thresher backfill --status backfill-3f2a…        # one backfill: its fire times, progress
    thresher backfill nightly                        # the schedule's backfills, newest first
    thresher backfill --cancel backfill-3f2a…

A tenant's own schedule is named `tenant/name` (`acme/nightly`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from thresher.cli.options import EXIT_FAILED, EXIT_USAGE, fail, with_store

if TYPE_CHECKING:
    from thresher.service.backfills import BackfillView
    from thresher.store import Store

__all__ = ["backfill"]


@click.command()
@click.argument("schedule", required=False)
@click.option("--from", "start", metavar="T1", help="ISO date or date-time, schedule's zone.")
@click.option("--to", "end", metavar="T2", help="ISO date or date-time (a date: to its end).")
@click.option("--max-running", type=click.IntRange(1, 1000), help="At most N jobs at once.")
@click.option("--status", "status_id", metavar="ID", help="Show backfill ID.")
@click.option("--cancel", "cancel_id", metavar="ID", help="Cancel backfill ID.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The server's TOML config (its [schedules.NAME]); needed to start a backfill.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the backfill object as JSON.")
@with_store
def backfill(
    *,
    schedule: str | None,
    start: str | None,
    end: str | None,
    max_running: int | None,
    status_id: str | None,
    cancel_id: str | None,
    config_file: Path | None,
    as_json: bool,
    store_url: str | None,
) -> None:
    """Backfill SCHEDULE: one job per fire time in [--from, --to] that has none yet, at a
    priority below its live ticks; or show (--status ID), list (SCHEDULE alone) or cancel
    (--cancel ID) backfills. Exit 1 when the backfill shown has failed."""
    asked = [bool(status_id), bool(cancel_id), bool(start or end)]
    if sum(asked) > 1 or (not any(asked) and schedule is None):
        fail("give SCHEDULE --from T1 --to T2, SCHEDULE alone, --status ID or --cancel ID",
             EXIT_USAGE)  # fmt: skip
    if status_id or cancel_id:
        _one(store_url, str(status_id or cancel_id), cancel=bool(cancel_id), as_json=as_json)
    elif start or end:
        if not (start and end and schedule):
            fail("a backfill needs SCHEDULE, --from and --to", EXIT_USAGE)
        _start(store_url, config_file, schedule, span=(start, end), max_running=max_running,
               as_json=as_json)  # fmt: skip
    else:
        _list(store_url, str(schedule), as_json)


def _start(
    store_url: str | None,
    config_file: Path | None,
    key: str,
    *,
    span: tuple[str, str],
    max_running: int | None,
    as_json: bool,
) -> None:
    from thresher.cli.schedules import read_server_config
    from thresher.schedules.backfills import BackfillError
    from thresher.service.backfills import start_backfill
    from thresher.service.schedules import UnknownSchedule, find_schedule
    from thresher.store import StoreError, open_store

    config = read_server_config(config_file)
    try:
        store = open_store(store_url)
        view = start_backfill(store, find_schedule(config, store, key), span, max_running)
    except (UnknownSchedule, BackfillError, StoreError) as exc:
        fail(str(exc).strip("'\""), EXIT_USAGE)
    _show(view, as_json)


def _one(store_url: str | None, backfill_id: str, cancel: bool, as_json: bool) -> None:
    from thresher.schedules.backfills import BackfillOutcome
    from thresher.service.backfills import cancel_backfill, view_backfill

    store = _store(store_url, writing=cancel)
    row = store.backfills.find(backfill_id)
    if row is None:
        fail(f"no backfill {backfill_id!r}", EXIT_USAGE)
    view = cancel_backfill(store, row) if cancel else view_backfill(store, row)
    _show(view, as_json)
    if view.outcome == BackfillOutcome.FAILED:
        raise SystemExit(EXIT_FAILED)


def _list(store_url: str | None, key: str, as_json: bool) -> None:
    from thresher.service.backfills import view_backfill

    store = _store(store_url, writing=False)
    views = [view_backfill(store, row) for row in store.backfills.of_schedule(key)]
    if as_json:
        click.echo(json.dumps({"object": "list", "data": [v.as_json() for v in views]}))
        return
    for view in views:
        click.echo(_headline(view))
    if not views:
        click.echo(f"{key}: no backfills")


def _store(store_url: str | None, writing: bool) -> Store:
    from thresher.store import StoreError, open_store, read_store

    try:
        return open_store(store_url) if writing else read_store(store_url)
    except StoreError as exc:
        fail(str(exc), EXIT_USAGE)


def _show(view: BackfillView, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(view.as_json()))
        return
    click.echo(_headline(view))
    for tick in view.as_json()["ticks"]:
        about = " ".join(str(v) for v in (tick["job_id"], tick["message"]) if v)
        click.echo(f"  {tick['local_time']}  {tick['state']:<9}  {about}".rstrip())


def _headline(view: BackfillView) -> str:
    row, progress = view.row, view.progress
    states = ", ".join(f"{state} {n}" for state, n in progress.states.items())
    return (
        f"{row.id} of {row.schedule}: {row.range_from} to {row.range_to} ({row.timezone}),"
        f" {view.outcome.value}, {progress.done}/{progress.total} done ({states})"
    )
