"""The ticker: a background thread that starts the config's scheduled jobs on time.

At each look (`look(now)`; the thread calls it every `POLL_SECONDS` with the real clock,
tests with any clock they like) and for each schedule not paused:

1. claims left unsettled by a scheduler that died are finished first;
2. every fire time since the last one decided (on a schedule's first look: only one
   that is due now) is decided by the catch-up policy (`schedules.due_ticks`);
3. each is claimed in the store's tick ledger — one claim wins, across threads, restarts
   and servers on one store — and only the winner acts: records it missed, skips it
   (`overlap = "skip"` while the schedule's last job has not ended), cancels the last
   job (`replace`), or queues the job and records its id.

The job is queued under an idempotency key made from the tick, so a scheduler that dies
between queueing and recording is finished by the next one with the same job: each
nominal time makes at most one job, ever.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from thresher.errors import ThresherError
from thresher.schedules import TickFate, due_ticks
from thresher.schedules.settings import ScheduleSettings
from thresher.service.state import ServiceState
from thresher.store import StoreError
from thresher.store.jobs import this_owner
from thresher.store.ticks import TickLedger, TickOutcome, tick_key

log = logging.getLogger("thresher.service.background.ticker")

POLL_SECONDS = 5.0
# A first look counts a fire time this recent as due (the ticker was just started).
FIRST_LOOK = timedelta(minutes=1)

Submit = Callable[[str, dict[str, object], str | None], str]


class Ticker:
    """Decides and starts the ticks of `state.config.schedules`; `submit` queues a job
    (tenant, body, idempotency key) and returns its id."""

    def __init__(self, state: ServiceState, submit: Submit) -> None:
        self.state, self.submit = state, submit
        self.ledger = TickLedger(state.store.db)
        self.owner = this_owner()

    def look(self, now: datetime) -> None:
        """Decide every schedule's ticks up to `now`."""
        for name, schedule in self.state.config.schedules.items():
            if schedule.paused:
                continue
            try:
                self._look_at(name, schedule, now)
            except (ThresherError, OSError):
                log.exception("schedule %s: its ticks could not be decided now", name)

    def _look_at(self, name: str, schedule: ScheduleSettings, now: datetime) -> None:
        for nominal in self.ledger.unsettled(name):
            self._start(name, schedule, nominal)
        since = self.ledger.last(name) or now - FIRST_LOOK
        ticks = due_ticks(
            schedule.schedule,
            since,
            now,
            schedule.catchup,
            max_catchup=schedule.max_catchup,
            starting_deadline=schedule.deadline,
        )
        for nominal, fate in ticks:
            if not self.ledger.claim(name, nominal, self.owner):
                continue  # another scheduler has it
            if fate == TickFate.MISSED:
                self.ledger.settle(name, nominal, TickOutcome.MISSED, message="too late to run")
            else:
                self._start(name, schedule, nominal)

    def _start(self, name: str, schedule: ScheduleSettings, nominal: datetime) -> None:
        """Start a claimed tick's job (or skip it for its overlap policy) and settle it."""
        running = self._running_job(name)
        if running is not None and schedule.overlap == "skip":
            message = f"job {running} of this schedule is still running"
            self.ledger.settle(name, nominal, TickOutcome.SKIPPED, message=message)
            return
        if running is not None and schedule.overlap == "replace":
            self.state.store.request_cancel(running)
        body = {**schedule.job, "name": f"{name}@{nominal.isoformat()}"}
        try:
            job_id = self.submit(schedule.tenant, body, tick_key(name, nominal))
        except ThresherError as exc:
            self.ledger.settle(name, nominal, TickOutcome.FAILED, message=str(exc))
            log.warning("schedule %s: the %s tick could not start: %s", name, nominal, exc)
            return
        self.ledger.settle(name, nominal, TickOutcome.STARTED, job_id=job_id)
        log.info("schedule %s: the %s tick started job %s", name, nominal, job_id)

    def _running_job(self, name: str) -> str | None:
        """The schedule's last started job, if it has not ended."""
        job_id = self.ledger.last_job(name)
        if job_id is None:
            return None
        try:
            finished = self.state.store.job(job_id).state.finished
        except StoreError:
            return None
        return None if finished else job_id


def start_ticker(state: ServiceState, submit: Submit) -> Callable[[], None]:
    """Start the ticker's thread (if the config has schedules); returns its stop."""
    if not state.config.schedules:
        return lambda: None
    ticker, stopping = Ticker(state, submit), threading.Event()

    def loop() -> None:
        while not stopping.is_set():
            ticker.look(datetime.now(UTC))
            stopping.wait(POLL_SECONDS)

    thread = threading.Thread(target=loop, name="thresher-ticker", daemon=True)
    thread.start()

    def stop() -> None:
        stopping.set()
        thread.join()

    return stop
