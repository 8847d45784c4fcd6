"""`thresher schedules`: the server's schedules — listed with their next fire times before
anything runs — paused, resumed, or triggered by hand, through the store the server uses
(so a running server acts on it within its next look, and a stopped one when it starts).

A config schedule is named as in the config (`nightly`); a tenant's own as
`tenant/name` (`acme/nightly`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from thresher.cli.options import EXIT_USAGE, fail, with_store

if TYPE_CHECKING:
    from thresher.service.config import ServerConfig
    from thresher.store import Store

__all__ = ["read_server_config", "schedules"]


@click.group(invoke_without_command=True)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The server's TOML config (its [schedules.NAME] sections); every command needs it.",
)
@click.pass_context
@with_store
def schedules(ctx: click.Context, config_file: Path | None, store_url: str | None) -> None:
    """List the server's schedules — the config's and the tenants' — with the next 5 fire
    times in each one's zone and in UTC and how its last tick ended; or pause, resume or
    trigger one."""
    if ctx.invoked_subcommand is not None:
        # The subcommand loads the config once its own arguments are read, so that
        # `thresher schedules pause --help` needs no --config.
        ctx.obj = (config_file, store_url)
        return
    from thresher.store import StoreError, read_store

    config = read_server_config(config_file)
    try:  # listing only looks: nothing is created
        _list(config, read_store(store_url))
    except StoreError as exc:
        fail(str(exc), EXIT_USAGE)


def read_server_config(config_file: Path | None) -> ServerConfig:
    """The server's config, its schedules checked; exit 2 naming what is wrong (also
    `thresher backfill`'s)."""
    from thresher.service.config import ConfigError, read_config
    from thresher.service.schedules import check_schedules

    if config_file is None:
        fail("Missing option '--config': the server's config file is needed", EXIT_USAGE)
    try:
        config = read_config(config_file)
        check_schedules(config)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    return config


def _site(given: tuple[Path | None, str | None]) -> tuple[ServerConfig, Store]:
    """The config and the store (opened to write) that pause, resume and trigger act on."""
    from thresher.store import StoreError, open_store

    config_file, store_url = given
    config = read_server_config(config_file)
    try:
        return config, open_store(store_url)
    except StoreError as exc:
        fail(str(exc), EXIT_USAGE)


def _list(config: ServerConfig, store: Store) -> None:
    from datetime import UTC, datetime

    from thresher.schedules.preview import describe_schedules
    from thresher.service.schedules import every_schedule

    found = [(s.key, s.settings, s.paused) for s in every_schedule(config, store)]
    for line in describe_schedules(found, store.ticks, datetime.now(UTC)) or ["none"]:
        click.echo(line)


@schedules.command()
@click.argument("name")
@click.pass_obj
def pause(given: tuple[Path | None, str | None], name: str) -> None:
    """Pause schedule NAME: its fire times are recorded as skipped until it is resumed."""
    _switch(_site(given), name, paused=True)


@schedules.command()
@click.argument("name")
@click.pass_obj
def resume(given: tuple[Path | None, str | None], name: str) -> None:
    """Resume schedule NAME from its next fire time."""
    _switch(_site(given), name, paused=False)


@schedules.command()
@click.argument("name")
@click.pass_obj
def trigger(given: tuple[Path | None, str | None], name: str) -> None:
    """Run schedule NAME now, as a manual tick (a running server starts it within its
    next look, under the schedule's overlap policy)."""
    from thresher.service import schedules as book

    site = _site(given)
    try:
        at = book.trigger(*site, name)
    except book.UnknownSchedule as exc:
        fail(str(exc), EXIT_USAGE)
    click.echo(f"{name}: manual tick at {at.isoformat()} claimed")


def _switch(site: tuple[ServerConfig, Store], name: str, paused: bool) -> None:
    from thresher.service import schedules as book

    try:
        book.set_paused(*site, name, paused)
    except book.UnknownSchedule as exc:
        fail(str(exc), EXIT_USAGE)
    click.echo(f"{name}: {'paused' if paused else 'resumed'}")
