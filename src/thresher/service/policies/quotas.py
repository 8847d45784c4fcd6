"""Tenants' limits on what they submit (`[tenants.<name>]` in the server config).

Checked when a job is submitted, each over-limit answered with 429 naming the limit:

- `max_priority`: a higher `priority` is refused (waiting does not help: no Retry-After);
- `worker_slots`: a submission asking for more `workers` is refused likewise;
- `queued_jobs`: while the tenant has this many jobs queued (not yet started; preempted
  jobs are not counted, they were admitted already), Retry-After 30 s;
- `rows_per_day`: while the tenant's jobs that finished in the last 24 hours read this
  many rows (committed shards' `rows_in`), Retry-After the seconds until enough of them
  leave the window. A job's size is not known before it runs, so one job may take the
  tenant past the limit; the next submission is the one refused.

`concurrent_jobs` and `worker_slots` also bound what runs: the scheduler holds a job
back (it waits, saying which limit) rather than refusing it here.

What a tenant makes and keeps has limits too, each with a default for every tenant
(`[tenant_defaults]`), counted in the store in the same transaction as the new row
(`store/_counted.py`) and refused with `over_limit`'s 429: `schedules`, `triggers`,
`webhook_endpoints`, `batches_in_flight` (Retry-After 30 s: one will end) and
`stored_bytes` (its uploaded files and batch results); `trigger_min_poll_seconds`
refuses a trigger that would poll faster (`check_poll`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from thresher.service.errors import TooManyRequests
from thresher.store import Store

if TYPE_CHECKING:  # config imports submission, which imports this
    from thresher.service.config import TenantLimits

QUEUE_RETRY_SECONDS = 30
DAY = timedelta(days=1)


def check_submission(
    store: Store, tenant: str, limits: TenantLimits, priority: int, workers: int | None
) -> None:
    """Raise TooManyRequests if the tenant may not queue a job of `priority` asking for
    `workers` worker slots now."""
    if limits.max_priority is not None and priority > limits.max_priority:
        raise TooManyRequests(
            f"priority {priority} is over tenant {tenant}'s limit max_priority ="
            f" {limits.max_priority}; submit with priority {limits.max_priority} or lower"
        )
    if limits.worker_slots is not None and workers is not None and workers > limits.worker_slots:
        raise TooManyRequests(
            f"workers {workers} is over tenant {tenant}'s limit worker_slots ="
            f" {limits.worker_slots}; ask for {limits.worker_slots} or fewer"
        )
    if limits.queued_jobs is not None:
        queued = store.views.job_counts(tenant).get("queued", 0)
        if queued >= limits.queued_jobs:
            raise TooManyRequests(
                f"tenant {tenant} has {queued} jobs queued, its limit queued_jobs ="
                f" {limits.queued_jobs}; submit again when one has started",
                retry_after=QUEUE_RETRY_SECONDS,
            )
    if limits.rows_per_day is not None:
        _check_rows(store, tenant, limits.rows_per_day)


def _check_rows(store: Store, tenant: str, limit: int) -> None:
    now = datetime.now(UTC)
    finished = store.views.rows_read_since(tenant, (now - DAY).isoformat())
    read = sum(rows for _, rows in finished)
    if read < limit:
        return
    raise TooManyRequests(
        f"tenant {tenant}'s jobs read {read:,} rows in the last 24 hours, its limit"
        f" rows_per_day = {limit:,}",
        retry_after=retry_after_rows(finished, limit, now),
    )


def retry_after_rows(finished: list[tuple[str, int]], limit: int, now: datetime) -> int:
    """Seconds until the rows read by jobs finished (at, rows) in the last day drop
    under `limit`, as the oldest leave the window.

    >>> now = datetime(2026, 1, 2, 12, tzinfo=UTC)
    >>> jobs = [("2026-01-01T13:00:00+00:00", 60), ("2026-01-02T11:00:00+00:00", 60)]
    >>> retry_after_rows(jobs, 100, now)  # the first leaves the window in an hour
    3601
    """
    read = sum(rows for _, rows in finished)
    for at, rows in finished:
        read -= rows
        if read < limit:
            leaves = datetime.fromisoformat(at) + DAY
            return max(1, int((leaves - now).total_seconds()) + 1)
    return int(DAY.total_seconds())


def over_limit(
    tenant: str, limit: str, value: float, has: str, then: str, *, retry_after: int | None = None
) -> TooManyRequests:
    """The 429 for `tenant` at its `limit` of `value`: `has` says what it has now, `then`
    what to do instead.

    >>> over_limit("acme", "schedules", 100, "100 schedules", "delete one first").detail
    'tenant acme has 100 schedules, its limit schedules = 100; delete one first'
    """
    shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
    return TooManyRequests(
        f"tenant {tenant} has {has}, its limit {limit} = {shown}; {then}", retry_after
    )


def check_poll(tenant: str, limits: TenantLimits, poll_seconds: float) -> None:
    """Raise TooManyRequests if a trigger of the tenant's would poll more often than its
    `trigger_min_poll_seconds` allows (each look lists the watched folder)."""
    least = limits.trigger_min_poll_seconds
    if poll_seconds < least:
        raise TooManyRequests(
            f"poll_seconds {poll_seconds:g} is under tenant {tenant}'s limit"
            f" trigger_min_poll_seconds = {least:g}; poll every {least:g} s or less often"
        )
