"""The scheduler: a background thread that runs queued jobs with the real engine.

Up to `max_concurrent_jobs` jobs run at once, each coordinated by a child process of its
own (`job_process`: nothing a tenant submits is parsed in the server process), watched by
a thread here that records how it ended. The store's queue decides the order (highest
`job.priority` first, oldest first within a priority) and its claim makes sure one job
starts once. A coordinator that dies (a crash in a native reader, the OOM killer) fails
its job alone; the job runs again until it has crashed `MAX_CRASHES` times.

Jobs still marked `running` by a server that is dead (killed, crashed, on this host or
another: `store/_owners.py`) are taken over, each by one live server (a conditional update
in the store), and resumed from their stored plan: committed shards are kept, the rest
run again, so every row still lands exactly once. A server looks for them when it starts
and then four times per `owner_timeout` (at least every 5 s) while it runs.

Each job runs on a slot lease (`store/_leases.py`): it starts only when the machine's
`[capacity]` has the worker slots it asks for free (or enough down to a minimum; see
`slots.py`), and gives them back when its coordinator ends. A server killed with SIGKILL
leaves its leases behind; the next taker sees their owner is dead and reclaims them.
When the job that should start next cannot, a running job of lower priority is
preempted (`slots.choose_victim`): it stops at its next heartbeat, keeps what it
committed, and waits in the queue as `preempted` until it resumes from its stored plan.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from thresher.faults import crash_point
from thresher.loops import start_loop
from thresher.service.background.job_process import (
    MAX_CRASHES,
    crash_message,
    fail_unless_finished,
    start_fork_server,
    start_job_process,
)
from thresher.service.background.slots import capacity, choose_victim, slot_request
from thresher.service.state import ServiceState
from thresher.store import JobRecord, JobState, Lease, Slots, StoreError, WaitingJob, beat_seconds

log = logging.getLogger("thresher.service.background.scheduler")

POLL_SECONDS = 1.0
# How long an ended job or batch may wait for its own server to announce it before any
# server's periodic look does (its own takes about a second; see store/_announced.py).
ANNOUNCE_GRACE_SECONDS = 30.0


class Scheduler:
    """Starts waiting jobs while fewer than `max_concurrent_jobs` run and their slots are
    free, preempting for higher priorities; `stop()` ends it."""

    def __init__(self, state: ServiceState) -> None:
        self.state = state
        self.limit = state.config.max_concurrent_jobs
        self.orphan_seconds = beat_seconds(state.config.owner_timeout)
        self._next_orphan_look = 0.0
        self._running: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._stop_loop: Callable[[], None] | None = None

    def start(self) -> None:
        """Reclaim dead servers' leases, resume orphaned jobs, announce the jobs and batches
        that ended unannounced, then take waiting ones."""
        start_fork_server(self.state.config.models.values())
        self.state.store.leases.reclaim_dead()
        self._resume_orphans()
        self._announce_untold(0.0)  # what ended while no server was there to say so
        self._stop_loop = start_loop(
            "thresher-scheduler", self._step, wake=self.state.jobs_waiting,
            registry=self.state.loops,
        )  # fmt: skip

    def stop(self) -> None:
        """Stop starting jobs; running jobs' threads are daemons and end with the process
        (a later server resumes them)."""
        self._stopping.set()
        if self._stop_loop is not None:
            self._stop_loop()

    def _step(self) -> float:
        """One look: resume orphans and announce what ended untold (now and then),
        reclaim dead servers' leases, start what can start. A look that raises (the queue
        unreadable) is run again by its supervisor (`thresher.loops`)."""
        if time.monotonic() >= self._next_orphan_look:
            self._resume_orphans()
            self._announce_untold(ANNOUNCE_GRACE_SECONDS)
        self.state.store.leases.reclaim_dead()
        while not self._stopping.is_set() and self._start_next():
            pass
        return min(POLL_SECONDS, self.orphan_seconds)

    def _start_next(self) -> bool:
        """Start the first waiting job that may start now; True if one did. A job held
        back by its own tenant's limit lets the next one by; one held back by the
        machine's slots or the job count holds back the rest (they would jump its
        priority) and may preempt a lower one. Each job that waits records why."""
        waiting = self.state.store.queue.waiting()
        held = self.state.store.leases.held()
        for position, job in enumerate(waiting):
            started, reason, blocks = self._try_start(job, held)
            if started:
                return True
            self._note(job, reason)
            if blocks:
                behind = f"queued behind a job of priority {job.priority} ({reason})"
                for later in waiting[position + 1 :]:
                    self._note(later, self._tenant_reason(later, held) or behind)
                self._preempt_for(job)
                return False
        return False

    def _try_start(self, job: WaitingJob, held: list[Lease]) -> tuple[bool, str | None, bool]:
        """Start `job` if it may: (whether it started, why not, whether that holds back
        the jobs behind it)."""
        store = self.state.store
        reason = self._tenant_reason(job, held)
        if reason is not None:
            return False, reason, False
        if not self._has_room():
            return False, f"max_concurrent_jobs: {self.limit} jobs running", True
        grant = store.leases.acquire(slot_request(self.state.config, job), self._capacity)
        if grant.granted:
            if store.queue.take(job.id):
                self._launch(store.job(job.id), job.resume, grant.cpu)
                return True, None, False
            store.leases.release(job.id)  # another server took it first
            return False, job.wait_reason, False
        return False, grant.reason, not grant.tenant_limited

    def _note(self, job: WaitingJob, reason: str | None) -> None:
        if reason != job.wait_reason:  # a write only when it changed
            self.state.store.queue.note_wait(job.id, reason)

    @property
    def _capacity(self) -> Slots:
        return capacity(self.state.config)

    def _tenant_reason(self, job: WaitingJob, held: list[Lease]) -> str | None:
        """Why the job's tenant may not start another job now (`concurrent_jobs`): a
        look at `held` that spares a lease attempt; `acquire` checks it again under the
        lease lock, so servers sharing a store cannot both start one past the limit."""
        cap = self.state.config.limits(job.tenant).concurrent_jobs if job.tenant else None
        if cap is None:
            return None
        mine = sum(1 for lease in held if lease.tenant == job.tenant)
        if mine < cap:
            return None
        return f"tenant limit concurrent_jobs: {mine} of {cap} of its jobs running"

    def _preempt_for(self, job: WaitingJob) -> None:
        queue = self.state.store.queue
        if queue.stopping():
            return  # one at a time: the last one preempted is still giving its slots back
        running = queue.running_with_leases()
        victim = choose_victim(job, running, self.state.config.min_run_seconds)
        # The tenant reads this: it names no job of another tenant.
        message = f"preempted by a job of priority {job.priority}; resumes when slots free"
        if victim is not None and queue.preempt(victim.id, message):
            log.info("job %s (priority %s) preempted by job %s", victim.id, victim.priority, job.id)

    def _has_room(self) -> bool:
        with self._lock:
            return len(self._running) < self.limit

    def _start_orphan(self, record: JobRecord) -> None:
        """Resume an orphaned job now if its slots are free, else queue it to resume."""
        config, store = self.state.config, self.state.store
        waiting = WaitingJob(
            record.id, record.tenant, record.priority, JobState.PREEMPTED, record.spec.run.workers
        )
        grant = store.leases.acquire(slot_request(config, waiting), self._capacity)
        if grant.granted and self._has_room():
            self._launch(record, True, grant.cpu)
            return
        store.leases.release(record.id)
        store.queue.requeue(record.id, grant.reason or "max_concurrent_jobs reached at start")

    def _launch(self, record: JobRecord, resume: bool, workers: int | None) -> None:
        thread = threading.Thread(
            target=self._job_thread,
            args=(record, resume, workers),
            name=f"job-{record.id}",
            daemon=True,
        )
        with self._lock:
            self._running[record.id] = thread
        thread.start()

    def _job_thread(self, record: JobRecord, resume: bool, workers: int | None) -> None:
        job_id = record.id
        how = "resuming it from its stored plan" if resume else "starting"
        ids = {"job_id": job_id, "request_id": record.spec.job.request_id}
        log.info(
            "job %s (tenant %s): %s on %s worker slot(s)", job_id, record.tenant, how, workers,
            extra=ids,
        )  # fmt: skip
        try:
            self._supervise(job_id, resume, workers)
        except Exception:
            log.exception("job %s: its coordinator could not be run", job_id)
            self._fail(job_id, "the server hit an internal error running this job")
        finally:
            with self._lock:
                self._running.pop(job_id, None)
            self._release(job_id)
            self.state.jobs_waiting.set()
        self._finished(job_id)

    def _supervise(self, job_id: str, resume: bool, workers: int | None) -> None:
        """Run the job's coordinator process to its end; after a crash, record it and run
        it again (resuming what it committed) until it has crashed MAX_CRASHES times. A
        preempted job is not run again here: it waits in the queue."""
        store = self.state.store
        while True:
            process = start_job_process(store.url, job_id, resume, workers)
            process.join()
            record = store.job(job_id)
            if process.exitcode == 0 or record.state.finished or record.state.waiting:
                return
            if record.state.awaiting_decision:  # held after its last commit: not a crash
                return
            crashes = store.record_crash(job_id)
            message = crash_message(process.exitcode, bool(record.plan.get("shards")), crashes)
            log.error("job %s: %s", job_id, message)
            if crashes >= MAX_CRASHES:
                self._fail(job_id, message)
                return
            resume = True

    def _resume_orphans(self) -> None:
        """Take over the service jobs left running by a dead owner (judged by one look at
        the heartbeats) and resume them. `Store.take_over` is a conditional update, so of
        the servers that find one orphan, one takes it; the others leave it be."""
        self._next_orphan_look = time.monotonic() + self.orphan_seconds
        store = self.state.store
        liveness = store.owners.judge()
        for job_id in store.queue.running_service_jobs():
            with self._lock:
                if job_id in self._running:
                    continue  # this server's (a crashed coordinator being run again)
            record = store.job(job_id)
            if liveness.alive(record.owner) or not store.take_over(job_id, record.owner):
                continue
            log.info("job %s: its owner %s is dead; taking it over", job_id, record.owner)
            self._start_orphan(store.job(job_id))

    def _announce_untold(self, grace: float) -> None:
        try:
            self.state.announce_untold(grace)
        except StoreError:
            log.exception("cannot announce the jobs and batches that ended unannounced")

    def _release(self, job_id: str) -> None:
        try:
            self.state.store.leases.release(job_id)
        except StoreError:
            log.exception("cannot release job %s's slots (the next taker reclaims them)", job_id)

    def _fail(self, job_id: str, message: str) -> None:
        try:
            fail_unless_finished(self.state.store, job_id, message)
        except StoreError:
            log.exception("cannot record job %s as failed", job_id)

    def _finished(self, job_id: str) -> None:
        try:
            record = self.state.store.job(job_id)
        except StoreError:
            log.exception("job %s vanished from the store", job_id)
            return
        if record.state.finished:
            crash_point("job_ended")
            self.state.job_finished(record)
