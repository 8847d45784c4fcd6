"""The service's commands: `thresher serve`, and `thresher token create / list / revoke`
for its bearer tokens. Both need the `service` extra, imported when a command runs."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import click

from thresher.cli.options import EXIT_FAILED, EXIT_USAGE, fail, with_store
from thresher.errors import ThresherError

__all__ = ["serve", "token"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The server's TOML config: data_dir, models, allowed_roots, limits.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text for people; json (one object a line) for log shippers.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@with_store
def serve(
    store_url: str | None,
    host: str,
    port: int,
    config_file: Path | None,
    *,
    log_format: str,
    log_level: str,
) -> None:
    """Run the HTTP service: upload files, submit and poll jobs, download results. Every
    request is logged (method, route, status, duration, tenant, request id)."""
    try:
        from thresher.service.app import build_state, log_to_stderr
        from thresher.service.app import serve as run_server
        from thresher.service.config import ConfigError
    except ImportError as exc:
        _without_service(exc)
    log_to_stderr(log_format, log_level)
    try:
        state = build_state(store_url, config_file)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except ThresherError as exc:
        fail(str(exc), EXIT_FAILED)
    run_server(state, host, port, log_level)


@click.group()
def token() -> None:
    """Bearer tokens for the HTTP service, one tenant each."""


@token.command("create")
@click.option("--tenant", required=True, help="The tenant the token acts for.")
@with_store
def token_create(store_url: str | None, tenant: str) -> None:
    """Make a token for TENANT and print it (only this once: the store keeps its hash)."""
    from thresher.store import open_store

    try:
        from thresher.service.policies.auth import create_token
    except ImportError as exc:
        _without_service(exc)
    try:
        click.echo(create_token(open_store(store_url), tenant))
    except (ThresherError, ValueError) as exc:
        fail(str(exc), EXIT_USAGE)


@token.command("list")
@with_store
def token_list(store_url: str | None) -> None:
    """Show every token's tenant, creation time and fingerprint (never the token)."""
    from thresher.cli.views.status import shown
    from thresher.service.policies.auth import list_tokens
    from thresher.store import open_store

    try:
        tokens = list_tokens(open_store(store_url))
    except ThresherError as exc:
        fail(str(exc), EXIT_FAILED)
    for info in tokens:
        click.echo(
            f"{info.fingerprint}  {info.created_at[:19].replace('T', ' ')}  {shown(info.tenant)}"
        )


@token.command("revoke")
@click.argument("fingerprint")
@with_store
def token_revoke(store_url: str | None, fingerprint: str) -> None:
    """Revoke the token with FINGERPRINT (from `thresher token list`): from now on it
    answers 401."""
    from thresher.cli.views.status import shown
    from thresher.service.policies.auth import revoke_token
    from thresher.store import open_store

    try:
        info = revoke_token(open_store(store_url), fingerprint)
    except (ThresherError, ValueError) as exc:
        fail(str(exc), EXIT_USAGE)
    click.echo(f"revoked {info.fingerprint} of tenant {shown(info.tenant)}")


def _without_service(exc: ImportError) -> NoReturn:
    fail(f"the service needs `pip install 'thresher[service]'` ({exc})", EXIT_USAGE)
