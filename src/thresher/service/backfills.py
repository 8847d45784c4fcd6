"""Backfills as the server, the routes and the CLI see them: made (the range checked, the
fire times frozen), shown (one object: each fire time's state and job, progress and
outcome, read from the tick ledger and the jobs), and cancelled.

Nothing here queues a job: the backfiller (`background/backfiller.py`) in every running
server advances each running backfill, claiming its fire times in the tick ledger one
winner at a time, so a backfill made by the CLI against a server's store goes on in that
server, and one interrupted by a crash goes on in the next.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from thresher.schedules.backfills import (
    BackfillOutcome,
    Progress,
    TickState,
    fire_times,
    outcome_of,
    progress_of,
)
from thresher.service.limits import PRIORITY_LIMIT
from thresher.service.schedules import Scheduled
from thresher.store import (
    BackfillRow,
    BackfillState,
    JobState,
    Store,
    Tick,
    TickOutcome,
    this_owner,
)

__all__ = [
    "BackfillTick",
    "BackfillView",
    "backfill_priority",
    "cancel_backfill",
    "start_backfill",
    "tick_state",
    "view_backfill",
]

# The jobs a backfill queues run this far below the schedule's live ticks, so the queue
# (highest priority first) starts a live tick before any backfill job waiting beside it,
# and the slots preempt a running backfill job for one.
PRIORITY_BELOW_LIVE = 1
_ACTIVE = {TickState.STARTING, TickState.QUEUED, TickState.PREEMPTED, TickState.RUNNING}


@dataclass(frozen=True)
class BackfillTick:
    """One fire time of a backfill: where it stands, its job, and why (skipped, failed)."""

    nominal: datetime
    state: TickState
    job_id: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class BackfillView:
    """A backfill with each fire time's state, its progress and its outcome."""

    row: BackfillRow
    ticks: list[BackfillTick]

    @property
    def progress(self) -> Progress:
        return progress_of([t.state for t in self.ticks])

    @property
    def outcome(self) -> BackfillOutcome:
        cancelled = self.row.state == BackfillState.CANCELLED
        return outcome_of([t.state for t in self.ticks], cancelled)

    @property
    def active(self) -> int:
        """Fire times whose job is being queued, waits or runs (what `max_running` caps)."""
        return sum(1 for t in self.ticks if t.state in _ACTIVE)

    def as_json(self) -> dict[str, Any]:
        """The backfill object the routes answer and `thresher backfill --json` prints."""
        row, progress, zone = self.row, self.progress, ZoneInfo(self.row.timezone)
        return {
            "object": "backfill",
            "id": row.id,
            "schedule": row.name,
            "from": row.range_from,
            "to": row.range_to,
            "timezone": row.timezone,
            "created_at": row.created_at,
            "ended_at": row.ended_at,
            "priority": row.priority,
            "max_running": row.max_running,
            "outcome": self.outcome.value,
            "progress": {
                "done": progress.done,
                "total": progress.total,
                "fraction": round(progress.done / progress.total, 4) if progress.total else 1.0,
                "states": progress.states,
            },
            "ticks": [
                {
                    "nominal_time": t.nominal.isoformat(),
                    "local_time": t.nominal.astimezone(zone).isoformat(),
                    "state": t.state.value,
                    "job_id": t.job_id,
                    "message": t.message,
                }
                for t in self.ticks
            ],
        }


def backfill_priority(schedule: Scheduled) -> int:
    """The priority of a backfill's jobs: just below the schedule's live ticks' own."""
    live = schedule.settings.job.get("priority", 0)
    live = live if isinstance(live, int) else 0
    return max(live - PRIORITY_BELOW_LIVE, -PRIORITY_LIMIT)


def start_backfill(
    store: Store,
    schedule: Scheduled,
    span: tuple[str, str],
    max_running: int | None = None,
    now: datetime | None = None,
) -> BackfillView:
    """Record a backfill of `schedule` over `span` (from, to: ISO dates or date-times on
    its wall clock); BackfillError for a range that is reversed, in the future, empty or
    longer than MAX_BACKFILL_TICKS. Running servers start its jobs within moments."""
    cron = schedule.settings.schedule
    times = fire_times(cron, *span, now or datetime.now(UTC))
    row = store.backfills.create(
        f"backfill-{uuid.uuid4().hex[:16]}",
        schedule.settings.tenant,
        schedule=(schedule.key, schedule.name, cron.timezone),
        span=span,
        nominals=times,
        priority=backfill_priority(schedule),
        max_running=max_running,
    )
    return view_backfill(store, row)


def view_backfill(store: Store, row: BackfillRow) -> BackfillView:
    """The backfill `row` with each fire time's state, read from the ledger and its jobs."""
    ticks = store.ticks.at(row.schedule, row.nominals)
    jobs = store.backfills.job_states([t.job_id for t in ticks.values() if t.job_id])
    cancelled = row.state == BackfillState.CANCELLED
    return BackfillView(
        row, [tick_state(row.id, cancelled, n, ticks.get(n), jobs) for n in row.nominals]
    )


def tick_state(
    backfill: str, cancelled: bool, nominal: datetime, tick: Tick | None, jobs: dict[str, str]
) -> BackfillTick:
    """Where the fire time `nominal` of `backfill` stands, from its ledger row (if any)
    and its job's state (`jobs`: job id → state)."""
    if tick is not None and tick.backfill == backfill:
        return _ours(nominal, tick, jobs)
    if tick is not None and tick.job_id is not None:
        who = f"backfill {tick.backfill}" if tick.backfill else "a live tick"
        message = f"already has job {tick.job_id} ({who})"
        return BackfillTick(nominal, TickState.SKIPPED, tick.job_id, message)
    if cancelled:
        return BackfillTick(nominal, TickState.CANCELLED, message="backfill cancelled before it")
    if tick is not None and tick.outcome == TickOutcome.CLAIMED:
        who = f"backfill {tick.backfill}" if tick.backfill else "the live ticker"
        return BackfillTick(nominal, TickState.PENDING, message=f"being started by {who}")
    return BackfillTick(nominal, TickState.PENDING)


def _ours(nominal: datetime, tick: Tick, jobs: dict[str, str]) -> BackfillTick:
    if tick.outcome == TickOutcome.CLAIMED:
        return BackfillTick(nominal, TickState.STARTING)
    if tick.outcome == TickOutcome.FAILED:
        return BackfillTick(nominal, TickState.FAILED, message=tick.message)
    if tick.job_id is None:  # settled skipped: the backfill was cancelled while claiming
        return BackfillTick(nominal, TickState.CANCELLED, message=tick.message)
    found = jobs.get(tick.job_id)
    if found is None:
        return BackfillTick(nominal, TickState.FAILED, tick.job_id, "its job is gone")
    return BackfillTick(nominal, TickState(JobState(found).value), tick.job_id)


def cancel_backfill(store: Store, row: BackfillRow) -> BackfillView:
    """Cancel a running backfill: no more of its fire times start, and its jobs still
    waiting (queued, preempted) are cancelled; a job already running runs to its end. A
    claim of a server that died before queueing is settled, freeing its fire time for a
    later backfill."""
    store.backfills.cancel(row.id)
    for tick in store.ticks.at(row.schedule, row.nominals).values():
        if tick.backfill != row.id:
            continue
        claimant = str(tick.claimed_by)
        if tick.outcome == TickOutcome.CLAIMED and not store.owners.alive(claimant):
            if store.ticks.take_over(row.schedule, tick.nominal, claimant, this_owner()):
                store.ticks.settle(
                    row.schedule, tick.nominal, TickOutcome.SKIPPED, message="backfill cancelled"
                )
        elif tick.job_id is not None and store.job(tick.job_id).state.waiting:
            store.request_cancel(tick.job_id)
    found = store.backfills.find(row.id)
    return view_backfill(store, found or row)
