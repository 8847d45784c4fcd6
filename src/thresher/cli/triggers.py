"""`thresher triggers`: show the server's triggers — the config's and the tenants' own —
with what they have taken, and `thresher triggers reset`, the one way to make a trigger
take files again.

A config trigger is named as in the config (`inbox`); a tenant's own as `tenant/name`
(`acme/inbox`), as `thresher schedules` names schedules.
"""

from __future__ import annotations

import getpass
import socket
from datetime import UTC, datetime
from pathlib import Path

import click

from thresher.cli.options import EXIT_USAGE, fail, with_store
from thresher.errors import ThresherError

__all__ = ["triggers"]


@click.group(invoke_without_command=True)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The server's TOML config, whose [triggers.NAME] sections to show.",
)
@click.pass_context
@with_store
def triggers(ctx: click.Context, config_file: Path | None, store_url: str | None) -> None:
    """List the server's triggers — the config's, then the tenants' own (`tenant/name`) —
    with each one's rule, files seen, last set and job, and last reset
    (`thresher triggers --config server.toml`)."""
    if ctx.invoked_subcommand is not None:
        return
    from thresher.service.config import ConfigError, read_config
    from thresher.service.triggers import check_triggers, every_trigger
    from thresher.store import StoreError, read_store
    from thresher.triggers.preview import describe_triggers

    if config_file is None:
        fail("--config: the server's config file is needed to list its triggers", EXIT_USAGE)
    try:  # listing only looks: no data folder, secret or store is created
        config = read_config(config_file)
        warnings = check_triggers(config)
        store = read_store(store_url)
    except (ConfigError, StoreError) as exc:
        fail(str(exc), EXIT_USAGE)
    found = {watched.key: watched.settings for watched in every_trigger(config, store)}
    for line in describe_triggers(found, store.triggers) or ["none"]:
        click.echo(line)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)


@triggers.command("reset")
@click.argument("name")
@click.option(
    "--since", required=True, help="ISO 8601 time (UTC unless it says): files taken then or later."
)
@click.option("--by", "reset_by", help="Who asks, for the record (default: user@host).")
@with_store
def reset(store_url: str | None, name: str, since: str, reset_by: str | None) -> None:
    """Forget the files trigger NAME (`inbox`, or a tenant's `acme/inbox`) took at or after
    --since, so they are taken again in new sets and jobs; the reset is recorded (who,
    when, since, how many)."""
    from thresher.store import open_store

    try:
        moment = datetime.fromisoformat(since)
    except ValueError:
        fail(f"--since: {since!r} is not an ISO 8601 time (2026-12-01T00:00:00Z)", EXIT_USAGE)
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        ledger = open_store(store_url).triggers
        if not ledger.recent(name, limit=1):
            fail(
                f"NAME: trigger {name!r} has taken no files in this store (a tenant's"
                " trigger is named tenant/name)",
                EXIT_USAGE,
            )
        by = reset_by or f"{getpass.getuser()}@{socket.gethostname()}"
        forgotten = ledger.reset(name, moment.astimezone(UTC), by)
    except ThresherError as exc:
        fail(str(exc), EXIT_USAGE)
    click.echo(f"trigger {name}: {forgotten} files taken since {moment.isoformat()} forgotten")
