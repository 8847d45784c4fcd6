"""`thresher validate JOB.toml`: every check `thresher run` makes before any work, and the
plan it would run, with nothing run and nothing written (`coordinator/prepare.py`).

Exit 0 when the job would start, 2 when it would not (one line per problem, naming the
field or the file), 1 when the store cannot be read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from thresher.cli.options import EXIT_FAILED, EXIT_USAGE, fail, with_store
from thresher.errors import SpecError, StoreError, ThresherError

if TYPE_CHECKING:
    from thresher.coordinator.prepare import Preview

__all__ = ["validate"]

SHARDS_SHOWN = 10  # the prose lists the first shards; --json lists them all


@click.command()
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override a spec value, e.g. --set source.uri=other.parquet (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict and the plan as JSON.")
@with_store
def validate(
    store_url: str | None, spec_file: Path, overrides: tuple[str, ...], as_json: bool
) -> None:
    """Check the job SPEC_FILE describes — the spec, the model file, the input's columns
    against the model's inputs — and show its plan: shards, workers, executor, sink.
    Nothing runs and nothing is written, to the output or to the store."""
    from thresher.coordinator.prepare import preview_job
    from thresher.notify import check_notify
    from thresher.spec import load_spec
    from thresher.store import read_store

    try:
        spec = load_spec(spec_file, overrides)
        check_notify(spec)
        preview = preview_job(spec, read_store(store_url))
    except StoreError as exc:
        fail(f"cannot read the store: {exc}", EXIT_FAILED)
    except SpecError as exc:
        _invalid(exc.problems, str(exc), as_json)
    except ThresherError as exc:  # the input cannot be read or planned (SourceError)
        _invalid([str(exc)], f"invalid job ({exc.context}): {exc}", as_json)
    if as_json:
        click.echo(json.dumps({"valid": True, **preview.to_json()}, indent=2))
    else:
        _describe(spec_file, preview)


def _invalid(problems: list[str], message: str, as_json: bool) -> NoReturn:
    """The verdict on a job that would not start: the problems as JSON on stdout (with
    `--json`), the message on stderr, exit 2."""
    if as_json:
        click.echo(json.dumps({"valid": False, "problems": problems}, indent=2))
    fail(message, EXIT_USAGE)


def _describe(spec_file: Path, preview: Preview) -> None:
    """The plan for a person: what the job reads, runs and writes, and where."""
    plan, placement, spec = preview.plan, preview.placement, preview.spec
    rows = f"{preview.rows:,} rows" if preview.rows is not None else "rows counted as read"
    shown = preview.to_json()
    click.echo(f"{spec_file}: valid; nothing was run or written")
    click.echo(f"  input: {len(plan.shards)} shard(s), {rows}, {len(plan.schema)} column(s)")
    click.echo(f"  model: {spec.model.kind} {spec.model.uri}, inputs {', '.join(preview.features)}")
    click.echo(f"  workers: {placement.describe()}, executor {spec.run.executor}")
    sink = shown["sink"]
    click.echo(f"  sink: {sink['format']} {sink['uri']} ({sink['mode']})")
    for shard in plan.shards[:SHARDS_SHOWN]:
        counted = f", {shard.rows:,} rows" if shard.rows is not None else ""
        click.echo(f"  shard {shard.index}: {shard.path} [{shard.start}, {shard.stop}){counted}")
    if len(plan.shards) > SHARDS_SHOWN:
        click.echo(f"  … and {len(plan.shards) - SHARDS_SHOWN:,} more shards (--json lists them)")
