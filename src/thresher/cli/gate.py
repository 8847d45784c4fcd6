"""The publish gate's commands: `thresher approve JOB` publishes a held job's output,
`thresher reject JOB` discards it. Both are safe to run again, after a crash or twice."""

from __future__ import annotations

import click

from thresher.cli.options import EXIT_FAILED, EXIT_USAGE, fail, with_store
from thresher.errors import SpecError, ThresherError

__all__ = ["approve", "reject"]


@click.command()
@click.argument("job_id")
@with_store
def approve(store_url: str | None, job_id: str) -> None:
    """Publish JOB_ID, held by its publish checks, exactly as a passing job is published,
    then send its success webhook."""
    from thresher.coordinator.gate import approve_job
    from thresher.notify import check_notify, notify_job_end
    from thresher.store import open_store

    try:
        store = open_store(store_url)
        check_notify(store.job(job_id).spec)  # the webhook can be signed, before publishing
        record = approve_job(store, job_id)
        notify_job_end(store, job_id, lambda line: click.echo(line, err=True))
    except SpecError as exc:
        fail(str(exc), EXIT_USAGE)
    except ThresherError as exc:
        fail(f"cannot approve ({exc.context}): {exc}", EXIT_FAILED)
    click.echo(f"job {job_id}: {record.state.value}; its output is published")


@click.command()
@click.argument("job_id")
@with_store
def reject(store_url: str | None, job_id: str) -> None:
    """Discard the staged output of JOB_ID, held by its publish checks; the previous
    output stays as it is."""
    from thresher.coordinator.gate import reject_job
    from thresher.store import open_store

    try:
        record = reject_job(open_store(store_url), job_id)
    except ThresherError as exc:
        fail(f"cannot reject ({exc.context}): {exc}", EXIT_FAILED)
    click.echo(f"job {job_id}: {record.state.value}; its staged output is discarded")
