"""What every command shares, written once: the `--store` option, the exit codes, and how
an error is printed.

Exit codes: 0 done, 1 the job (or the check a command made) failed, 2 bad usage, a bad
spec or input, or something named that does not exist.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

__all__ = ["EXIT_FAILED", "EXIT_USAGE", "STORE_HELP", "fail", "store_option", "with_store"]

EXIT_FAILED = 1
EXIT_USAGE = 2
STORE_HELP = (
    "Job store: sqlite:///path.db or postgresql://… "
    "[env THRESHER_STORE; default ~/.local/share/thresher/store.db]"
)
Command = TypeVar("Command", bound=Callable[..., Any])


def fail(message: str, code: int) -> NoReturn:
    """Print `thresher: message` on stderr and leave with `code` (EXIT_FAILED, EXIT_USAGE)."""
    click.echo(f"thresher: {message}", err=True)
    sys.exit(code)


def store_option(envvar: str | None = None) -> Callable[[Command], Command]:
    """The `--store URL` option, as `thresher` (with `envvar`) and every command that opens
    the store take it; its value arrives as the `store` parameter."""
    return click.option("--store", "store", envvar=envvar, metavar="URL", help=STORE_HELP)


def with_store(command: Callable[..., None]) -> Callable[..., None]:
    """Give `command` its own `--store URL` and call it with `store_url=`: the nearest
    `--store` given — after the command, after its group, or after `thresher` (which also
    reads `$THRESHER_STORE`) — or None, the default store. Put it right above `def`."""

    @store_option()
    @functools.wraps(command)
    def chosen(*args: Any, store: str | None, **kwargs: Any) -> None:
        command(*args, store_url=store or _given_store(click.get_current_context()), **kwargs)

    return chosen


def _given_store(context: click.Context) -> str | None:
    """The `--store` of the nearest enclosing command or group that was given one."""
    outer = context.parent
    while outer is not None:
        if url := outer.params.get("store"):
            return str(url)
        outer = outer.parent
    return None
