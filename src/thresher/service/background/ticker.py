"""The ticker: a background thread that starts scheduled jobs on time.

At each look (`look(now)`; the thread calls it every `POLL_SECONDS` with the real clock,
or at once when a tick is triggered by hand; tests call it with any clock they like) and
for each schedule (the config's and the tenants', `service/schedules.py`):

1. claims left unsettled — by a scheduler that died, or manual ticks
   (`thresher schedules trigger`, `POST /v1/schedules/{name}/trigger`) — are taken over
   (one scheduler wins each) and finished first, paused or not;
2. unless the schedule is paused, every fire time since the last one decided (on a
   schedule's first look: only one that is due now) is decided by the catch-up policy
   (`schedules.due_ticks`);
3. each is claimed in the store's tick ledger — one claim wins, across threads, restarts
   and servers on one store — and only the winner acts: records it missed, skips it
   (`overlap = "skip"` while the schedule's last job has not ended), cancels the last
   job (`replace`), or queues the job and records its id.

The job is queued under an idempotency key made from the tick, so a scheduler that dies
between queueing and recording is finished by the next one with the same job: each
nominal time makes at most one job, ever. Its body is the schedule's `job` with the
fire time filled in (`schedules/templates.py`), and its spec names the schedule and the
nominal time, which its manifest records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial

from thresher.errors import ThresherError
from thresher.faults import crash_point
from thresher.loops import Strikes, start_loop
from thresher.schedules import Cron, TickFate, due_ticks
from thresher.schedules.catchup import MAX_LISTED
from thresher.schedules.clock import Clock
from thresher.schedules.notice import TickNotice
from thresher.schedules.templates import fill_in
from thresher.service.schedules import Scheduled, every_schedule, quarantine_schedule
from thresher.service.state import ServiceState
from thresher.store import (
    ScheduleRow,
    StoreError,
    TickOutcome,
    this_owner,
    tick_key,
)

log = logging.getLogger("thresher.service.background.ticker")

POLL_SECONDS = 5.0
# A first look counts a fire time this recent as due (the ticker was just started).
FIRST_LOOK = timedelta(minutes=1)

# (tenant, body, idempotency key, (schedule key, nominal time)) -> the queued job's id
Submit = Callable[[str, dict[str, object], str, tuple[str, datetime]], str]


class Ticker:
    """Decides and starts every schedule's ticks; `submit` queues a job."""

    def __init__(self, state: ServiceState, submit: Submit) -> None:
        self.state, self.submit = state, submit
        self.ledger = state.store.ticks
        self.owner = this_owner()
        self.strikes = Strikes("ticker", state.config.quarantine_after)

    def look(self, now: datetime) -> datetime | None:
        """Decide every schedule's ticks up to `now`; returns the next fire time of any
        schedule not paused (None: none), so the thread can wake for it. A schedule that
        raises (a cron that never fires, a row that does not read) is counted by its key
        and, after `quarantine_after` looks in a row, paused with the reason; the others
        go on."""
        store = self.state.store

        def unreadable(row: ScheduleRow, exc: Exception) -> None:
            self.strikes.failed(row.key, exc, partial(quarantine_schedule, store, row))

        upcoming: list[datetime] = []
        for schedule in every_schedule(self.state.config, store, unreadable):
            if schedule.paused_reason is not None:
                continue  # quarantined: not looked at until it is resumed
            fire = self.strikes.attempt(
                schedule.key,
                partial(self._look_and_next, schedule, now),
                partial(quarantine_schedule, store, schedule),
            )
            upcoming += [fire] if fire is not None else []
        return min(upcoming, default=None)

    def _look_and_next(self, schedule: Scheduled, now: datetime) -> datetime | None:
        """Decide the schedule's ticks; its next fire time (None: paused, or none)."""
        self._look_at(schedule, now)
        if schedule.paused:
            return None
        times = schedule.settings.schedule.after(now, 1)
        return times[0] if times else None

    def _look_at(self, schedule: Scheduled, now: datetime) -> None:
        for nominal, claimant in self.ledger.unsettled(schedule.key):
            if self._ours(schedule.key, nominal, claimant):
                self._start(schedule, nominal)
        settings = schedule.settings
        since = self.ledger.last(schedule.key) or now - FIRST_LOOK
        if schedule.paused:
            self._skip_paused(schedule.key, settings.schedule, (since, now))
            return
        ticks = due_ticks(
            settings.schedule,
            since,
            now,
            settings.catchup,
            max_catchup=settings.max_catchup,
            starting_deadline=settings.deadline,
        )
        for nominal, fate in ticks:
            if not self.ledger.claim(schedule.key, nominal, self.owner):
                continue  # another scheduler has it
            crash_point("tick_claimed")
            if fate == TickFate.MISSED:
                self._settle_missed(schedule, nominal, TickOutcome.MISSED, "too late to run")
            else:
                self._start(schedule, nominal)

    def _skip_paused(self, key: str, cron: Cron, span: tuple[datetime, datetime]) -> None:
        """A paused schedule's fire times are recorded as skipped, so resuming it goes on
        from there: nothing that fell due while it was paused runs later."""
        for nominal in cron.between(*span, limit=MAX_LISTED):
            if self.ledger.claim(key, nominal, self.owner):
                self.ledger.settle(key, nominal, TickOutcome.SKIPPED, message="paused")

    def _ours(self, key: str, nominal: datetime, claimant: str) -> bool:
        """Whether this ticker should finish an unsettled claim: its own (a look that
        failed half-way), or one it takes over from MANUAL or a dead scheduler."""
        if claimant == self.owner:
            return True
        if claimant != self.ledger.MANUAL and self.state.store.owners.alive(claimant):
            return False  # another scheduler is at work on it
        return self.ledger.take_over(key, nominal, claimant, self.owner)

    def _start(self, schedule: Scheduled, nominal: datetime) -> None:
        """Start a claimed tick's job (or skip it for its overlap policy) and settle it."""
        key, settings = schedule.key, schedule.settings
        running = self._running_job(key)
        if running is not None and settings.overlap == "skip":
            message = f"job {running} of this schedule is still running"
            self.ledger.settle(key, nominal, TickOutcome.SKIPPED, message=message)
            return
        if running is not None and settings.overlap == "replace":
            self.state.store.request_cancel(running)
        body = fill_in(settings.job, nominal, settings.schedule.zone)
        body = {**body, "name": body.get("name") or f"{key}@{nominal.isoformat()}"}
        try:
            job_id = self.submit(settings.tenant, body, tick_key(key, nominal), (key, nominal))
        except ThresherError as exc:
            self._settle_missed(schedule, nominal, TickOutcome.FAILED, str(exc))
            log.warning("schedule %s: the %s tick could not start: %s", key, nominal, exc)
            return
        crash_point("tick_queued")
        self.ledger.settle(key, nominal, TickOutcome.STARTED, job_id=job_id)
        log.info("schedule %s: the %s tick started job %s", key, nominal, job_id)

    def _settle_missed(
        self, schedule: Scheduled, nominal: datetime, outcome: TickOutcome, message: str
    ) -> None:
        """Record a tick that will not run, and tell `on_tick_missed` (once: only the
        scheduler that settles it tells)."""
        self.ledger.settle(schedule.key, nominal, outcome, message=message)
        notice = TickNotice(
            schedule.key, schedule.name, schedule.settings, nominal, outcome.value, message
        )
        self.state.tick_missed(notice)

    def _running_job(self, key: str) -> str | None:
        """The schedule's last started job, if it has not ended."""
        job_id = self.ledger.last_job(key)
        if job_id is None:
            return None
        try:
            finished = self.state.store.job(job_id).state.finished
        except StoreError:
            return None
        return None if finished else job_id


def start_ticker(
    state: ServiceState, submit: Submit, clock: Clock | None = None
) -> Callable[[], None]:
    """Start the ticker's thread; returns its stop. It looks at the next fire time (so a
    tick starts its job within moments of its time), at least every POLL_SECONDS (a
    tenant may have made a schedule), and at once when `state.ticks_waiting` is set (a
    tick was triggered by hand). `clock` defaults to `THRESHER_CLOCK`'s, else the real
    one (`schedules/clock.py`)."""
    clock = clock or Clock.from_environment()
    ticker = Ticker(state, submit)

    def step() -> float:
        now = clock.now()
        upcoming = ticker.look(now)
        wait = POLL_SECONDS
        if upcoming is not None:
            wait = min(wait, (upcoming - now).total_seconds() + 0.001)
        return clock.real_seconds(max(wait, 0.0))

    return start_loop("thresher-ticker", step, wake=state.ticks_waiting, registry=state.loops)
