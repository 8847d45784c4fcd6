"""The backfiller: a background thread that starts running backfills' jobs.

At each look, for each running backfill (`service/backfills.py`), oldest first:

1. its fire times claimed and not settled — by this server, or by one that died (taken
   over, one winner) — are finished first: their jobs queued, their ticks settled;
2. then, while fewer than its `max_running` jobs are being started, wait or run, each
   pending fire time is claimed in the tick ledger (`claim_for_backfill`: a fire time
   with no row, or one the ticker settled without a job) and its job queued at the
   backfill's priority (below the schedule's live ticks) under the tick's idempotency
   key, so a server killed between queueing and settling is finished by the next with
   the same job; a fire time that has a job of another's is skipped, and says so;
3. a backfill whose every fire time is done is marked ended.

Each fire time makes one job, ever, across restarts and servers on one store: the ledger
row is the claim, and the job's idempotency key is the tick's. `max_running` is counted
by each server at its look, so two servers looking at once may each start one more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from thresher.errors import ThresherError
from thresher.faults import crash_point
from thresher.loops import start_loop
from thresher.schedules.backfills import TickState
from thresher.schedules.templates import fill_in
from thresher.service.backfills import view_backfill
from thresher.service.schedules import Scheduled, UnknownSchedule, find_schedule
from thresher.service.state import ServiceState
from thresher.store import BackfillRow, BackfillState, TickOutcome, this_owner, tick_key

log = logging.getLogger("thresher.service.background.backfiller")

POLL_SECONDS = 2.0

# (tenant, body, idempotency key, (schedule key, nominal time)) -> the queued job's id
Submit = Callable[[str, dict[str, object], str, tuple[str, datetime]], str]


class Backfiller:
    """Starts the jobs of every running backfill; `submit` queues a job."""

    def __init__(self, state: ServiceState, submit: Submit) -> None:
        self.state, self.submit = state, submit
        self.store = state.store
        self.owner = this_owner()

    def look(self) -> None:
        """Advance every running backfill; one that raises is logged, the others go on."""
        for row in self.store.backfills.running():
            try:
                self.advance(row)
            except Exception:  # one backfill's trouble stops no other
                log.exception("backfill %s could not advance", row.id)

    def advance(self, row: BackfillRow) -> None:
        """Finish its claims, start what its cap allows, and end it when all is done."""
        try:
            schedule = find_schedule(self.state.config, self.store, row.schedule)
        except UnknownSchedule:
            log.warning("backfill %s: schedule %s is gone; cancelled", row.id, row.schedule)
            self.store.backfills.cancel(row.id)
            return
        ledger = self.store.ticks
        claimed = {
            t.nominal: t
            for t in ledger.at(row.schedule, row.nominals).values()
            if t.outcome == TickOutcome.CLAIMED
        }
        for claim in claimed.values():
            mine = claim.backfill == row.id
            if mine and self._ours(row.schedule, claim.nominal, str(claim.claimed_by)):
                self._start(row, schedule, claim.nominal)
        view = view_backfill(self.store, row)
        active = view.active
        for tick in view.ticks:
            if row.max_running is not None and active >= row.max_running:
                break
            if tick.state != TickState.PENDING or tick.nominal in claimed:
                continue  # done, ours already, or being started by another
            if ledger.claim_for_backfill(row.schedule, tick.nominal, row.id, self.owner):
                crash_point("backfill_claimed")
                self._start(row, schedule, tick.nominal)
                active += 1
        if all(t.state.done for t in view_backfill(self.store, row).ticks):
            self.store.backfills.end(row.id)
            log.info("backfill %s of %s ended", row.id, row.schedule)

    def _ours(self, key: str, nominal: datetime, claimant: str) -> bool:
        """Whether to finish a backfill claim: this server's own, or a dead one's taken
        over (one winner)."""
        if claimant == self.owner:
            return True
        if self.store.owners.alive(claimant):
            return False  # another server is at work on it
        return self.store.ticks.take_over(key, nominal, claimant, self.owner)

    def _start(self, row: BackfillRow, schedule: Scheduled, nominal: datetime) -> None:
        """Queue a claimed fire time's job at the backfill's priority and settle it."""
        key, settings = row.schedule, schedule.settings
        body = fill_in(settings.job, nominal, settings.schedule.zone)
        name = body.get("name") or f"{key}@{nominal.isoformat()}"
        body = {**body, "name": name, "priority": row.priority}
        try:
            job_id = self.submit(settings.tenant, body, tick_key(key, nominal), (key, nominal))
        except ThresherError as exc:
            self.store.ticks.settle(key, nominal, TickOutcome.FAILED, message=str(exc))
            log.warning("backfill %s: the %s tick could not start: %s", row.id, nominal, exc)
            return
        crash_point("backfill_queued")
        self.store.ticks.settle(key, nominal, TickOutcome.STARTED, job_id=job_id)
        now = self.store.backfills.find(row.id)
        if now is not None and now.state == BackfillState.CANCELLED:
            self.store.request_cancel(job_id)  # cancelled while this one was being queued
        log.info("backfill %s: the %s tick started job %s", row.id, nominal, job_id)


def start_backfiller(state: ServiceState, submit: Submit) -> Callable[[], None]:
    """Start the backfiller's thread; returns its stop. It looks every POLL_SECONDS, and
    at once when `state.backfills_waiting` is set (a backfill was made or cancelled)."""
    backfiller = Backfiller(state, submit)

    def step() -> float:
        backfiller.look()
        return POLL_SECONDS

    return start_loop(
        "thresher-backfiller", step, wake=state.backfills_waiting, registry=state.loops
    )
