"""The scheduler: a background thread that runs queued jobs with the real engine.

Up to `max_concurrent_jobs` jobs run at once, each coordinated by a child process of its
own (`job_process`: nothing a tenant submits is parsed in the server process), watched by
a thread here that records how it ended. The store's queue decides the order (highest
`job.priority` first, oldest first within a priority) and its claim makes sure one job
starts once. A coordinator that dies (a crash in a native reader, the OOM killer) fails
its job alone; the job runs again until it has crashed `MAX_CRASHES` times.

When the server starts, jobs still marked `running` by a server process that is gone
(killed, crashed) are resumed from their stored plan: committed shards are kept, the rest
run again, so every row still lands exactly once.
"""

from __future__ import annotations

import logging
import threading

from thresher.service.background.job_process import (
    MAX_CRASHES,
    crash_message,
    fail_unless_finished,
    start_fork_server,
    start_job_process,
)
from thresher.service.state import ServiceState
from thresher.store import JobRecord, StoreError
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
        start_fork_server()
        for record in self._claim_orphans():
            self._launch(record, resume=True)
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
                self._launch(record, resume=False)
            self.state.jobs_waiting.wait(POLL_SECONDS)

    def _has_room(self) -> bool:
        with self._lock:
            return len(self._running) < self.limit

    def _launch(self, record: JobRecord, resume: bool) -> None:
        thread = threading.Thread(
            target=self._job_thread, args=(record, resume), name=f"job-{record.id}", daemon=True
        )
        with self._lock:
            self._running[record.id] = thread
        thread.start()

    def _job_thread(self, record: JobRecord, resume: bool) -> None:
        job_id = record.id
        if resume:
            log.info("job %s was left running by %s; resuming it", job_id, record.owner)
        else:
            log.info("job %s (tenant %s) starting", job_id, record.tenant)
        try:
            self._supervise(job_id, resume)
        except Exception:
            log.exception("job %s: its coordinator could not be run", job_id)
            self._fail(job_id, "the server hit an internal error running this job")
        finally:
            with self._lock:
                self._running.pop(job_id, None)
            self.state.jobs_waiting.set()
        self._finished(job_id)

    def _supervise(self, job_id: str, resume: bool) -> None:
        """Run the job's coordinator process to its end; after a crash, record it and run
        it again (resuming what it committed) until it has crashed MAX_CRASHES times."""
        store = self.state.store
        while True:
            process = start_job_process(store.url, job_id, resume)
            process.join()
            record = store.job(job_id)
            if process.exitcode == 0 or record.state.finished:
                return
            crashes = store.record_crash(job_id)
            message = crash_message(process.exitcode, bool(record.plan.get("shards")), crashes)
            log.error("job %s: %s", job_id, message)
            if crashes >= MAX_CRASHES:
                self._fail(job_id, message)
                return
            resume = True

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
            self.state.job_finished(record)
