"""`thresher status`: what the store knows about jobs, for a person to read."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from thresher.store import JobRecord, ShardState, Store


def show_jobs(store: Store, limit: int, console: Console | None = None) -> None:
    """One line per recent job: id, name, state, shards done/total, rows, errors, rate."""
    console = console or Console(width=160)
    table = Table(
        "job", "name", "state", "shards", "rows in", "rows out", "errors", "rows/s", "created"
    )
    for job in store.jobs(limit):
        totals = store.totals(job.id)
        table.add_row(
            job.id,
            job.name,
            job.state.value,
            f"{totals.shards_done}/{job.shard_count}",
            f"{totals.rows_in:,}",
            f"{totals.rows_out:,}",
            f"{totals.rows_error:,}",
            _rate(job),
            job.created_at[:19].replace("T", " "),
        )
    console.print(table)


def show_job(store: Store, job_id: str, console: Console | None = None) -> None:
    """A job's state, counts and every shard that is not done (with why, if it failed)."""
    console = console or Console(width=160)
    job = store.job(job_id)
    totals = store.totals(job_id)
    console.print(f"job {job.id} ({job.name}): {job.state.value}")
    console.print(
        f"  shards: {totals.shards_done}/{job.shard_count} done, {totals.shards_failed} failed"
    )
    console.print(
        f"  rows: {totals.rows_in:,} in, {totals.rows_out:,} out, {totals.rows_error:,} errors"
        f"  rate: {_rate(job)} rows/s"
    )
    console.print(
        f"  created: {job.created_at}  finished: {job.finished_at or '-'}  owner: {job.owner}"
    )
    if job.message:
        console.print(f"  message: {job.message}")
    for shard in store.shards(job_id):
        if shard.state != ShardState.DONE:
            why = f": {shard.error}" if shard.error else ""
            console.print(
                f"  shard {shard.index}: {shard.state.value}, {shard.attempts} attempt(s){why}"
            )


def _rate(job: JobRecord) -> str:
    if job.manifest and job.manifest.get("rows_per_second"):
        return f"{job.manifest['rows_per_second']:,.0f}"
    return "-"
