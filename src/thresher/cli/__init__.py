"""The `thresher` command line: the root group and `main`, the console entry point.

One module per command group: `jobs` (run, resume, status, cancel, tune, retry-errors),
`validate`, `demo`, `service` (serve, token), `schedules`, `backfill`, `triggers`, `drift`,
`profile`, `report`, `quality` (actuals, quality), `gate` (approve, reject); what they
share — `--store`, the exit codes, the error printer — is in `options`, what they draw on
a terminal in `views/`.
Exit codes: 0 done, 1 job failed, 2 bad usage or spec.
"""

from __future__ import annotations

import faulthandler

import click

from thresher.cli.allocator import use_jemalloc
from thresher.cli.backfill import backfill
from thresher.cli.demo import demo
from thresher.cli.drift import drift
from thresher.cli.gate import approve, reject
from thresher.cli.jobs import cancel, resume, retry_errors, run, status, tune
from thresher.cli.options import store_option
from thresher.cli.profile import profile
from thresher.cli.quality import actuals, quality
from thresher.cli.report import report
from thresher.cli.schedules import schedules
from thresher.cli.service import serve, token
from thresher.cli.triggers import triggers
from thresher.cli.validate import validate
from thresher.leaving import ended, leave_when_done

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="thresher")
@store_option(envvar="THRESHER_STORE")
def cli(store: str | None) -> None:
    """thresher: batch inference, exactly once per record.

    Run a model over every record of a dataset and write the predictions to files or a
    database. Start with `thresher demo`, then `thresher run JOB.toml`.
    """


for command in (
    *(run, resume, status, cancel, tune, retry_errors, demo, serve, token),
    *(validate, profile, report, schedules, backfill, triggers, drift, actuals, quality),
    *(approve, reject),
):
    cli.add_command(command)


def main() -> None:
    """Console entry point. A crash in native code (a reader, a model library) prints
    where Python was, instead of a bare exit 139; a command that ended leaves without
    tearing the interpreter down (thresher/leaving.py)."""
    faulthandler.enable()
    use_jemalloc()  # before pyarrow is imported (thresher/cli/allocator.py)
    leave_when_done()
    try:
        cli(prog_name="thresher")  # click's standalone mode always ends in SystemExit
    except SystemExit as exc:
        ended(exc.code)
        raise
