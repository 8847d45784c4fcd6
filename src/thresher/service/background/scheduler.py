"""The scheduler: a background thread that runs queued jobs with the real engine.

Up to `max_concurrent_jobs` jobs run at once, each on its own thread as the coordinator of
its worker processes. The store's queue decides the order (highest `job.priority` first,
oldest first within a priority) and its claim makes sure one job starts once.

When the server starts, jobs still marked `running` by a server process that is gone
(killed, crashed) are resumed from their stored plan: committed shards are kept, the rest
run again, so every row still lands exactly once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from thresher.coordinator.job import resume_job, run_job
from thresher.errors import ThresherError
from thresher.service.state import ServiceState
from thresher.store import JobRecord, JobState, StoreError
from thresher.store.views import running_service_jobs

log = logging.getLogger("thresher.service.background.scheduler")

POLL_SECONDS = 1.0


class Scheduler:
    """Starts queued jobs while fewer than `max_concurrent_jobs` run; `stop()` ends it."""

    def __init__(self, state: ServiceState) -> None:
        self.state = state
        self.limit = state.config.max_concurrent_jobs
        self._running: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="thresher-scheduler", daemon=True)

    def start(self) -> None:
        """Resume orphaned jobs, then start taking queued ones."""
        for record in self._claim_orphans():
            self._launch(record, self._resume)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop starting jobs; running jobs' threads are daemons and end with the process
        (a later server resumes them)."""
        self._stopping.set()
        self.state.jobs_waiting.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.state.jobs_waiting.clear()
            while self._has_room() and not self._stopping.is_set():
                try:
                    record = self.state.store.claim_next_queued()
                except Exception:
                    log.exception("cannot read the job queue")
                    break
                if record is None:
                    break
                self._launch(record, self._run)
            self.state.jobs_waiting.wait(POLL_SECONDS)

    def _has_room(self) -> bool:
        with self._lock:
            return len(self._running) < self.limit

    def _launch(self, record: JobRecord, work: Callable[[JobRecord], None]) -> None:
        thread = threading.Thread(
            target=self._job_thread, args=(record, work), name=f"job-{record.id}", daemon=True
        )
        with self._lock:
            self._running[record.id] = thread
        thread.start()

    def _job_thread(self, record: JobRecord, work: Callable[[JobRecord], None]) -> None:
        job_id = record.id
        try:
            work(record)
        except ThresherError as exc:
            log.warning("job %s failed: %s", job_id, exc)
            self._fail(job_id, str(exc))  # the engine records most failures; not all
        except Exception:
            log.exception("job %s crashed", job_id)
            self._fail(job_id, "the server hit an internal error running this job")
        finally:
            with self._lock:
                self._running.pop(job_id, None)
            self.state.jobs_waiting.set()
        self._finished(job_id)

    def _run(self, record: JobRecord) -> None:
        log.info("job %s (tenant %s) starting", record.id, record.tenant)
        run_job(record.spec, self.state.store, queued_id=record.id)

    def _resume(self, record: JobRecord) -> None:
        log.info("job %s was left running by %s; resuming it", record.id, record.owner)
        if not record.plan.get("shards"):
            # Claimed but never planned: nothing was written, so run it from the start.
            self._run(record)
            return
        # This process claimed it already, so its own (live) ownership must not block it.
        resume_job(record.id, self.state.store, force=True)

    def _claim_orphans(self) -> list[JobRecord]:
        """Service jobs left running by a server process that is gone, now claimed by this
        one. The store refuses to hand over a job whose coordinator is alive (another
        server on this host, or any on another host), and those are left alone."""
        claimed = []
        for job_id in running_service_jobs(self.state.store.db):
            try:
                claimed.append(self.state.store.claim(str(job_id)))
            except StoreError as exc:
                log.info("not resuming job %s: %s", job_id, exc)
        return claimed

    def _fail(self, job_id: str, message: str) -> None:
        try:
            if not self.state.store.job(job_id).state.finished:
                self.state.store.finish(job_id, JobState.FAILED, None, message)
        except StoreError:
            log.exception("cannot record job %s as failed", job_id)

    def _finished(self, job_id: str) -> None:
        try:
            record = self.state.store.job(job_id)
        except StoreError:
            log.exception("job %s vanished from the store", job_id)
            return
        if record.state.finished:
            self.state.job_finished(record)
