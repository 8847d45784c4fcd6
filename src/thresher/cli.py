"""The `thresher` command line. Exit codes: 0 done, 1 job failed, 2 bad usage or spec."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from thresher.errors import SpecError, ThresherError

EXIT_FAILED = 1
EXIT_USAGE = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="thresher")
def cli() -> None:
    """thresher: batch inference, exactly once per record.

    Run a model over every record of a dataset and write the predictions to files or a
    database. Start with `thresher demo`, then `thresher run JOB.toml`.
    """


@cli.command()
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override a spec value, e.g. --set batch.size=1024 (repeatable).",
)
def run(spec_file: Path, overrides: tuple[str, ...]) -> None:
    """Run the job that SPEC_FILE (TOML, YAML or JSON) describes."""
    from thresher.engine.job import run_job
    from thresher.progress import reporter_for
    from thresher.spec import load_spec
    from thresher.summary import print_result

    try:
        spec = load_spec(spec_file, overrides)
        result = run_job(spec, reporter_for(sys.stderr))
    except SpecError as exc:
        _fail(str(exc), EXIT_USAGE)
    except ThresherError as exc:
        _fail(f"job failed: {exc}", EXIT_FAILED)
    print_result(result)
    if not result.succeeded:
        sys.exit(EXIT_FAILED)


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
def demo(rows: int, directory: Path) -> None:
    """Score a synthetic credit table end to end, offline: data, model, spec, results."""
    from thresher.demo import run_demo

    try:
        ok = run_demo(directory, rows)
    except ThresherError as exc:
        _fail(f"demo failed: {exc}", EXIT_FAILED)
    if not ok:
        sys.exit(EXIT_FAILED)


def _fail(message: str, code: int) -> None:
    click.echo(f"thresher: {message}", err=True)
    sys.exit(code)


def main() -> None:
    """Console entry point."""
    cli(prog_name="thresher")
