"""`thresher status`: what the store knows about jobs, for a person to read, or as JSON
for a script (`status --json`: `jobs_json`, `job_json`).

Names, messages and errors come from job specs and tenants' requests, so they are shown
as plain text: never read as rich markup (`[red]`, `[link=…]`), and with every control
and format character (an ANSI escape, a carriage return, a bidi override) written out as
its escape (`\\x1b`), so nothing a tenant names can move the cursor, clear the screen or
disguise a line.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from thresher.postgres import without_password
from thresher.store import JobRecord, JobState, ShardRecord, ShardState, Store


def show_jobs(store: Store, limit: int, console: Console | None = None) -> None:
    """One line per recent job: id, name, state, shards done/total, rows, errors, rate,
    and for a queued or preempted job what it waits for."""
    console = console or Console(width=160)
    table = Table(
        "job",
        "name",
        "state",
        "shards",
        "rows in",
        "rows out",
        "errors",
        "rows/s",
        "created",
        "why it waits",
    )
    for job in store.jobs(limit):
        totals = store.totals(job.id)
        table.add_row(
            shown(job.id),
            shown(job.name),
            job.state.value,
            f"{totals.shards_done}/{job.shard_count}",
            f"{totals.rows_in:,}",
            f"{totals.rows_out:,}",
            f"{totals.rows_error:,}",
            _rate(job),
            job.created_at[:19].replace("T", " "),
            shown(job.wait_reason or ""),
        )
    console.print(table)


def show_job(store: Store, job_id: str, console: Console | None = None) -> None:
    """A job's state, counts and every shard that is not done (with why, if it failed)."""
    console = console or Console(width=160)
    job = store.job(job_id)
    totals = store.totals(job_id)
    say = _plain(console)
    say(f"job {shown(job.id)} ({shown(job.name)}): {job.state.value}")
    say(f"  shards: {totals.shards_done}/{job.shard_count} done, {totals.shards_failed} failed")
    say(
        f"  rows: {totals.rows_in:,} in, {totals.rows_out:,} out, {totals.rows_error:,} errors"
        f"  rate: {_rate(job)} rows/s"
    )
    say(f"  created: {job.created_at}  finished: {job.finished_at or '-'}  owner: {job.owner}")
    if job.manifest and job.manifest.get("delta_version") is not None:
        table = without_password(str(job.manifest.get("table", "")))
        say(f"  table: {shown(table)} at version {job.manifest['delta_version']}")
    if job.manifest and job.manifest.get("iceberg_snapshot_id") is not None:
        table = str(job.manifest.get("table", ""))
        say(f"  table: {shown(table)} at snapshot {job.manifest['iceberg_snapshot_id']}")
    if job.message:
        say(f"  message: {shown(job.message)}")
    if job.wait_reason:
        say(f"  why it waits: {shown(job.wait_reason)}")
    for check in (job.manifest or {}).get("publish_checks", []):
        verdict = "passed" if check["passed"] else "FAILED"
        say(f"  publish check {shown(check['name'])}: {verdict}: {shown(str(check['reason']))}")
    if job.state == JobState.HELD:
        say(f"  held: `thresher approve {job.id}` publishes it, `thresher reject` discards it")
    for shard in store.shards(job_id):
        if shard.state != ShardState.DONE:
            why = f": {shown(shard.error)}" if shard.error else ""
            say(f"  shard {shard.index}: {shard.state.value}, {shard.attempts} attempt(s){why}")


def jobs_json(store: Store, limit: int) -> list[dict[str, Any]]:
    """The recent jobs, newest first, each as `job_json` has it less its shard list."""
    return [_job_fields(store, job) for job in store.jobs(limit)]


def job_json(store: Store, job_id: str) -> dict[str, Any]:
    """One job as plain JSON data: id, name, state, times, counts, shards by state, its
    problems (the job's message when it failed, then each failed shard's error), the
    manifest once it ended, and every shard that is not done."""
    job = store.job(job_id)
    shards = store.shards(job_id)
    unfinished = [
        {"index": s.index, "state": s.state.value, "attempts": s.attempts, "error": s.error}
        for s in shards
        if s.state != ShardState.DONE
    ]
    return {**_job_fields(store, job, shards), "manifest": job.manifest, "unfinished": unfinished}


def _job_fields(
    store: Store, job: JobRecord, shards: list[ShardRecord] | None = None
) -> dict[str, Any]:
    shards = store.shards(job.id) if shards is None else shards
    totals = store.totals(job.id)
    by_state = Counter(s.state for s in shards)
    told = job.state in (JobState.FAILED, JobState.HELD) and job.message
    held = job.state == JobState.HELD
    problems = [f"held: {job.message}" if held else job.message] if told else []
    problems += [f"shard {s.index}: {s.error}" for s in shards if s.state == ShardState.FAILED]
    rate = job.manifest.get("rows_per_second") if job.manifest else None
    return {
        "id": job.id,
        "name": job.name,
        "state": job.state.value,
        "tenant": job.tenant,
        "priority": job.priority,
        "owner": job.owner,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
        "shard_count": job.shard_count,
        "shards": {state.value: by_state[state] for state in ShardState},
        "rows_in": totals.rows_in,
        "rows_out": totals.rows_out,
        "rows_error": totals.rows_error,
        "rows_per_second": rate,
        "message": job.message,
        "wait_reason": job.wait_reason,
        "problems": problems,
        "publish_checks": (job.manifest or {}).get("publish_checks"),
    }


def shown(text: str) -> Text:
    """`text` as plain rich Text, each control or format character written as its escape."""
    return Text("".join(_escaped(c) for c in text))


def _escaped(char: str) -> str:
    if unicodedata.category(char) in ("Cc", "Cf"):
        return char.encode("unicode_escape").decode("ascii")
    return char


def _plain(console: Console) -> Callable[[str], None]:
    """Print a line as it is: no markup, no highlighting of numbers and paths."""
    return lambda line: console.print(line, markup=False, highlight=False)


def _rate(job: JobRecord) -> str:
    if job.manifest and job.manifest.get("rows_per_second"):
        return f"{job.manifest['rows_per_second']:,.0f}"
    return "-"
