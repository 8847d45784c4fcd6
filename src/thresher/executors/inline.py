"""The inline executor: the job's one worker is a thread of the coordinator's process.

A job of one shard has one worker, and a worker process costs its start before any row is
read: a fresh interpreter, thresher, pyarrow and the model's library imported again
(`benchmarks/results/` has the measured start). In a thread, the coordinator's imports
serve. `local` picks this executor for a job of one shard on the CPU (`local_executor`).

What a thread cannot be is killed. A cancelled or preempted job stops it at the next
chunk (its `Progress`); a shard that makes no progress for `run.shard_timeout` seconds is
reported failed, not retried (the stuck thread still holds the model), and so is every
later task. A crash of the model's native code takes the coordinator with it, like a
killed coordinator: `thresher resume` redoes the shard, exactly once as ever.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from thresher.executors.serve import serve_tasks
from thresher.worker.tasks import Event, Progress, ShardDone, ShardFailed, Task, WorkerSetup

__all__ = ["InlineExecutor"]

STOP_WAIT_SECONDS = 5.0  # how long shutdown waits for the thread to reach a chunk's end


class _Stopped(BaseException):
    """Raised in the worker thread at its next progress report (a chunk's end, at most
    every `PROGRESS_SECONDS`) once the executor shuts down (a BaseException, so the task
    loop's `except Exception` does not report it)."""


@dataclass
class InlineExecutor:
    """Runs shard tasks one at a time on a thread with `threads` compute threads."""

    threads: int = 1
    shard_timeout: float = 600.0
    _tasks: queue.SimpleQueue[Task | None] = field(default_factory=queue.SimpleQueue, init=False)
    _events: queue.SimpleQueue[Event | str] = field(default_factory=queue.SimpleQueue, init=False)
    _running: list[Task] = field(default_factory=list, init=False)  # submitted, not reported
    _thread: threading.Thread | None = field(default=None, init=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False)
    _ready: bool = field(default=False, init=False)
    _last_heard: float = field(default_factory=time.monotonic, init=False)
    _stuck: str | None = field(default=None, init=False)

    def start(self, setup: WorkerSetup) -> None:
        self._thread = threading.Thread(
            target=self._work, args=(setup,), name="thresher-worker", daemon=True
        )
        self._thread.start()

    def submit(self, task: Task) -> None:
        self._running.append(task)
        self._tasks.put(task)

    def pending(self) -> int:
        return len(self._running)

    def events(self, timeout: float = 1.0) -> Iterator[Event]:
        """The events that arrive within `timeout` seconds: the first waited for, the
        rest taken as they are."""
        if self._stuck is not None:
            yield from self._fail_all(self._stuck)
            return
        wait: float | None = timeout
        while True:
            try:
                event = self._events.get(timeout=wait) if wait else self._events.get_nowait()
            except queue.Empty:
                break
            wait = None
            self._last_heard = time.monotonic()
            if isinstance(event, str):  # READY: the model is loaded, the clock runs
                self._ready = True
                continue
            if isinstance(event, ShardDone | ShardFailed):
                self._running.pop(0)  # one at a time, in the order submitted
            yield event
        yield from self._stalled()

    def shutdown(self) -> None:
        self._stopping.set()
        self._tasks.put(None)
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_SECONDS)  # a daemon: never holds the exit
        self._thread = None

    def _work(self, setup: WorkerSetup) -> None:
        with contextlib.suppress(_Stopped):
            serve_tasks(setup, self.threads, self._tasks.get, self._send)

    def _send(self, event: Event | str) -> None:
        if isinstance(event, Progress) and self._stopping.is_set():
            raise _Stopped
        self._events.put(event)

    def _stalled(self) -> Iterator[Event]:
        quiet = time.monotonic() - self._last_heard
        if self._ready and self._running and quiet > self.shard_timeout:
            self._stuck = (
                f"no progress for {self.shard_timeout:g}s (run.shard_timeout); the job's"
                " worker is a thread of the coordinator, which cannot be restarted"
            )
            yield from self._fail_all(self._stuck)

    def _fail_all(self, why: str) -> Iterator[Event]:
        while self._running:
            yield ShardFailed(self._running.pop(0), "ShardTimeout", why, retry=False)
