"""The service's shared state: the store, the server's config, and the hooks that run when
a job ends. Every router, the scheduler, the request buffer and the webhook sender work
through one `ServiceState`.

A route reaches it through a parameter typed `StateDep` (`Depends(get_state)`) and the
caller's tenant through one typed `Tenant` (`Depends(current_tenant)`, from
`thresher.service.policies.auth`):

    @router.post("/v1/things")
    def make(state: StateDep, tenant: Tenant) -> dict[str, str]:
        return {"id": submit_job(state, tenant, {"input_file_id": ..., "model": "tiny"})}

Anything that must act when a job reaches a terminal state (succeeded, failed, cancelled)
appends a callable to `on_job_finished`; the scheduler calls each with the job's final
record when a job it ran ends (the cancel route does, for a job cancelled before it
started). A hook that raises is logged and does not stop the others. Once they ran, the
job is recorded announced; a job a dead server ended and never announced is announced by
`announce_untold`, which the scheduler calls at its periodic look (see
`store.announced`), so every hook must be safe to run twice. The same goes for
`on_batch_ended` and OpenAI-style batches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from thresher.loops import LoopRegistry, Strikes
from thresher.schedules.notice import TickNotice
from thresher.service.config import ServerConfig
from thresher.service.policies.rates import RequestRates
from thresher.store import BatchRow, JobRecord, Store

log = logging.getLogger("thresher.service")

JobHook = Callable[[JobRecord], None]
BatchHook = Callable[[BatchRow], None]
TickHook = Callable[[TickNotice], None]


@dataclass
class ServiceState:
    """What the service's parts share. `data_dir` holds `uploads/` and `outputs/<job id>/`."""

    store: Store
    config: ServerConfig
    data_dir: Path
    on_job_finished: list[JobHook] = field(default_factory=list)
    # Called with each tick the ticker records missed or failed (`notify.on_missed`).
    on_tick_missed: list[TickHook] = field(default_factory=list)
    # Set when a job is queued, so the scheduler starts it without waiting for its poll.
    jobs_waiting: threading.Event = field(default_factory=threading.Event)
    # Set when a tick is triggered by hand, so the ticker starts it without waiting.
    ticks_waiting: threading.Event = field(default_factory=threading.Event)
    # Set when a backfill is made or cancelled, so the backfiller acts at once.
    backfills_waiting: threading.Event = field(default_factory=threading.Event)
    # Set when a batch is created or cancelled, so the batch worker acts at once.
    batches_waiting: threading.Event = field(default_factory=threading.Event)
    # Called with each OpenAI-style batch that has just ended (its webhook events).
    on_batch_ended: list[BatchHook] = field(default_factory=list)
    # Each token's request bucket (`policies/rates.py`).
    rates: RequestRates = field(default_factory=RequestRates)
    # Sends failed webhooks of these subjects again (the webhook sender's, while it runs).
    redeliver: Callable[[list[str]], int] | None = None
    # The background loops this server runs and how each is doing (`/healthz`).
    loops: LoopRegistry = field(default_factory=LoopRegistry)
    # Counts the ended jobs and batches `announce_untold` failed on (`thresher.loops`).
    announcer: Strikes = field(init=False)
    # Unix seconds when this server read its config: its models' `created` (/v1/models).
    started_at: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.announcer = Strikes("announcer", self.config.quarantine_after)

    def job_finished(self, record: JobRecord) -> None:
        """Call every `on_job_finished` hook with a job's final record, then record the
        job announced."""
        for hook in list(self.on_job_finished):
            try:
                hook(record)
            except Exception:
                log.exception("on_job_finished hook %r failed for job %s", hook, record.id)
        self.store.announced.job_told(record.id)

    def batch_ended(self, batch_id: str) -> None:
        """Call every `on_batch_ended` hook with the batch, as it ended, then record the
        batch announced."""
        batch = self.store.batches.find(batch_id)
        if batch is None:
            return
        for hook in list(self.on_batch_ended):
            try:
                hook(batch)
            except Exception:
                log.exception("on_batch_ended hook %r failed for batch %s", hook, batch_id)
        self.store.announced.batch_told(batch_id)

    def announce_untold(self, grace: float) -> int:
        """Run the end hooks of the jobs and batches that ended at least `grace` seconds
        ago and were never announced (their server died first); returns how many. One
        that cannot be announced (its record does not read) is counted and, after
        `quarantine_after` looks in a row, recorded announced unannounced (logged), so
        it stops no other."""
        told = self.store.announced
        jobs = told.untold_jobs(grace)
        for job_id in jobs:
            log.info("job %s ended unannounced; announcing it now", job_id)
            self.announcer.attempt(
                f"job {job_id}",
                partial(self._announce_job, job_id),
                partial(_given_up, told.job_told, job_id),
            )
        batches = told.untold_batches(grace)
        for batch_id in batches:
            log.info("batch %s ended unannounced; announcing it now", batch_id)
            self.announcer.attempt(
                f"batch {batch_id}",
                partial(self.batch_ended, batch_id),
                partial(_given_up, told.batch_told, batch_id),
            )
        return len(jobs) + len(batches)

    def _announce_job(self, job_id: str) -> None:
        self.job_finished(self.store.job(job_id))

    def tick_missed(self, notice: TickNotice) -> None:
        """Call every `on_tick_missed` hook with a tick that did not start its job."""
        for hook in list(self.on_tick_missed):
            try:
                hook(notice)
            except Exception:
                log.exception("on_tick_missed hook %r failed for %s", hook, notice.key)

    @property
    def buffer_dir(self) -> Path:
        """Where the request buffer writes each batch's input file, `<batch id>.jsonl`."""
        return self.data_dir / "buffer"

    @property
    def uploads_dir(self) -> Path:
        """Where uploaded files are stored, under server-generated names."""
        return self.data_dir / "uploads"

    def output_dir(self, job_id: str) -> Path:
        """Where a job's results (`part-*`), `_errors/` and `_SUCCESS` go."""
        return self.data_dir / "outputs" / job_id


def _given_up(tell: Callable[[str], None], subject: str, reason: str) -> None:
    """Record a job or batch announced though its hooks never ran (`reason`, logged by
    the announcer's strikes): trying it at every look would only fail again."""
    tell(subject)


def get_state(connection: HTTPConnection) -> ServiceState:
    """FastAPI dependency: the app's ServiceState (set by `create_app`)."""
    state = connection.app.state.service
    assert isinstance(state, ServiceState)
    return state


StateDep = Annotated[ServiceState, Depends(get_state)]
"""A route parameter typed `StateDep` receives the app's ServiceState."""
