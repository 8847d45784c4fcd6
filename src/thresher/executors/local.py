"""The local executor: N worker processes on this machine, each loading the model once.

Each worker owns one duplex pipe: tasks go down, events come up. The coordinator waits on
every pipe and every process sentinel at once, so a worker that dies (killed, segfault,
out of memory) is noticed at once; its shard is reported lost and a fresh worker takes its
place. On the CPU, workers are forked from a zygote that has loaded the model once
(`zygote.py`: imports and weights shared by every worker); on GPUs they are spawned, each
seeing its own GPU. Neither forks a process whose thread pools have run (the coordinator's
Arrow pool, a model's BLAS or OpenMP): a known source of deadlocks.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from thresher.children import child_environment, die_with_parent, main_left_behind
from thresher.executors.inline import InlineExecutor
from thresher.executors.serve import READY, serve_tasks
from thresher.executors.zygote import Zygote
from thresher.leaving import leave_process
from thresher.plan.placement import Placement
from thresher.spec import RunSection
from thresher.worker.tasks import Event, ShardDone, ShardFailed, Task, WorkerSetup

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


class WorkerProcess(Protocol):
    """What the executor needs of a worker's process: a spawned multiprocessing Process,
    or a worker forked by a zygote."""

    @property
    def sentinel(self) -> int: ...

    @property
    def exitcode(self) -> int | None: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class _Worker:
    slot: int  # its place in the pool: a replacement takes the same slot (and GPU)
    process: WorkerProcess
    conn: Connection
    task: Task | None = None
    last_heard: float = field(default_factory=time.monotonic)
    ready: bool = False


@dataclass
class LocalExecutor:
    """Runs shard tasks on `workers` processes with `threads` compute threads each; worker
    slot i sees the GPU `devices[i]` (CUDA_VISIBLE_DEVICES; None: the coordinator's)."""

    workers: int
    threads: int = 1
    shard_timeout: float = 600.0
    devices: tuple[str, ...] | None = None
    fork: bool = False  # workers forked from a zygote (CPU only: CUDA does not survive a fork)
    _setup: WorkerSetup | None = field(default=None, init=False)
    _pool: list[_Worker] = field(default_factory=list, init=False)
    _queue: deque[Task] = field(default_factory=deque, init=False)
    _zygote: Zygote | None = field(default=None, init=False)

    def start(self, setup: WorkerSetup) -> None:
        self._setup = setup
        if self.fork:
            self._zygote = self._start_zygote()
        self._pool = [self._spawn(slot) for slot in range(self.workers)]

    def submit(self, task: Task) -> None:
        self._queue.append(task)
        self._dispatch()

    def pending(self) -> int:
        """Tasks submitted and not yet reported done, failed or lost."""
        return len(self._queue) + sum(1 for w in self._pool if w.task is not None)

    def events(self, timeout: float = 1.0) -> Iterator[Event]:
        """Events that arrive within `timeout` seconds (none if nothing happens)."""
        by_handle: dict[Any, _Worker] = {}
        for worker in self._pool:
            by_handle[worker.conn] = worker
            by_handle[worker.process.sentinel] = worker
        for handle in wait(list(by_handle), timeout):
            worker = by_handle[handle]
            if worker not in self._pool:
                continue  # already replaced through its other handle
            if handle is worker.conn:
                yield from self._receive(worker)
            else:
                yield from self._lost(worker, "worker process died")
        yield from self._stalled()
        self._dispatch()

    def shutdown(self) -> None:
        for worker in self._pool:
            with suppress(BrokenPipeError, OSError):
                worker.conn.send(None)
        for worker in self._pool:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
            worker.process.close()
        self._pool = []
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def _receive(self, worker: _Worker) -> Iterator[Event]:
        try:
            event = worker.conn.recv()
        except (EOFError, OSError):
            yield from self._lost(worker, "worker process died")
            return
        worker.last_heard = time.monotonic()
        if event == READY:
            worker.ready = True
            return
        if isinstance(event, ShardDone | ShardFailed):
            worker.task = None
            # Its next shard now, not after the coordinator has committed this one (a
            # few milliseconds of store writes the worker would otherwise sit through).
            self._dispatch()
        yield event

    def _stalled(self) -> Iterator[Event]:
        """A worker that reported nothing for `shard_timeout` seconds is stuck: kill it.
        The clock runs from when the worker is ready, so loading the model (slow for a
        large one, or on a busy machine) is never taken for a stuck shard."""
        now = time.monotonic()
        for worker in list(self._pool):
            held = worker.ready and worker.task is not None
            if held and now - worker.last_heard > self.shard_timeout:
                worker.process.kill()
                why = f"no progress for {self.shard_timeout:g}s (run.shard_timeout); worker killed"
                yield from self._lost(worker, why, error="ShardTimeout")

    def _lost(self, worker: _Worker, why: str, error: str = "WorkerLost") -> Iterator[Event]:
        worker.process.join(timeout=1)
        code = worker.process.exitcode
        self._pool.remove(worker)
        worker.conn.close()
        with suppress(ValueError):  # a spawned process that would not die: leave it be
            worker.process.close()
        self._pool.append(self._spawn(worker.slot))
        if worker.task is not None:
            yield ShardFailed(worker.task, error, f"{why} (exit code {code})", retry=True)

    def _dispatch(self) -> None:
        for worker in self._pool:
            if worker.task is None and self._queue:
                worker.task = self._queue.popleft()
                worker.last_heard = time.monotonic()
                worker.conn.send(worker.task)

    def _spawn(self, slot: int) -> _Worker:
        """A worker for `slot`: forked from the zygote (a fresh zygote if it died), or
        spawned with the slot's GPU."""
        assert self._setup is not None
        parent, child = mp.get_context("spawn").Pipe(duplex=True)
        process: WorkerProcess
        if self._zygote is not None:
            process = self._fork(child)
        else:
            spawned = mp.get_context("spawn").Process(
                target=worker_main,
                args=(self._setup, child, self.threads),
                name=_name(),
                daemon=True,
            )
            with child_environment(self._variables(slot)), main_left_behind():
                spawned.start()
            child.close()
            process = spawned
        return _Worker(slot=slot, process=process, conn=parent)

    def _fork(self, child: Connection) -> WorkerProcess:
        """A worker forked from the zygote; a zygote that died (killed, out of memory) is
        started afresh first."""
        assert self._zygote is not None
        if self._zygote.alive:
            with suppress(OSError):
                return self._zygote.fork(child, self.threads)
        self._zygote.close()
        self._zygote = self._start_zygote()
        return self._zygote.fork(child, self.threads)

    def _start_zygote(self) -> Zygote:
        assert self._setup is not None
        with child_environment(self._variables(0)):
            return Zygote(self._setup, name=_name("zygote"))

    def _variables(self, slot: int) -> dict[str, str]:
        """The environment a worker (or the zygote) starts with: its thread limits and GPU."""
        variables = {name: str(self.threads) for name in THREAD_VARIABLES}
        if self.devices is not None:
            variables["CUDA_VISIBLE_DEVICES"] = self.devices[slot]
        return variables


def _name(role: str = "worker") -> str:
    return f"thresher-{role}-{uuid.uuid4().hex[:6]}"


def worker_main(setup: WorkerSetup, conn: Connection, threads: int) -> None:
    """A worker process: load the model once, then run shards until told to stop."""
    die_with_parent()
    serve_tasks(setup, threads, conn.recv, conn.send)
    leave_process()


def local_executor(run: RunSection, placement: Placement) -> LocalExecutor | InlineExecutor:
    """The `local` executor plug-in: a worker process per slot of the placement, or, for a
    placement whose one worker is `inline`, a thread of this process."""
    if placement.inline:
        return InlineExecutor(threads=placement.threads, shard_timeout=run.shard_timeout)
    return LocalExecutor(
        workers=placement.workers,
        threads=placement.threads,
        shard_timeout=run.shard_timeout,
        devices=placement.devices,
        fork=placement.forked,
    )
