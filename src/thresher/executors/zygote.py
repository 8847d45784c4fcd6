"""Worker processes forked from one that has loaded the model: the imports and the
weights once per machine, not once per worker.

A spawned worker imports its libraries and loads its own copy of the model: for MiniLM
on torch that is ~300 MiB of interpreter heap and ~100 MiB of weights per worker, and
seconds of start-up each. A zygote is spawned once per job, imports the model's module
and, for the torch kinds, loads the model; each worker is then `fork`ed from it and
shares those pages copy-on-write (nothing in inference writes to the weights), so the
whole tree's memory grows little with workers, and a replacement for a dead worker starts
at once.

Forking is safe only from a process whose thread pools never ran: torch's OpenMP pool,
once used with two threads, hangs a forked child's first parallel op. So the zygote loads
with one thread and never predicts; each worker then sets its own thread count. Kinds
whose loading starts thread pools (onnxruntime's session, the boosters' OpenMP) are only
imported in the zygote and loaded by each worker after the fork. Placements on GPUs never
fork (CUDA does not survive it); they spawn, as before.

The zygote is the workers' parent: it reaps them and tells the coordinator each exit
code. The coordinator watches a worker through a pidfd, which works for a grandchild, and
never waits on the zygote's loading.

The zygote itself is spawned (a fresh interpreter: the CLI's coordinator has imported
none of the model's libraries, and its threads are its own), except in a service's job
process, which comes from a fork server that imported the registered models' libraries
once (`service/background/warm.py`): there it is forked, and starts with torch and the
model's code in memory instead of importing them for seconds.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections import deque
from contextlib import suppress
from multiprocessing import get_context, reduction, util
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any, ClassVar, Literal

from thresher.children import die_with_parent, main_left_behind
from thresher.models.options import TORCH_LIBRARIES
from thresher.spec import ModelSection
from thresher.worker.tasks import WorkerBroken, WorkerSetup

__all__ = ["ForkedWorker", "Zygote", "fork_zygotes_here", "preloads"]

# Kinds the zygote loads before forking: torch models, whose loading runs no thread pool
# at one thread and whose weights are never written while predicting.
PRELOADED_KINDS = frozenset({"torch", "sentence-transformers", "transformers", "llm"})
JOIN_POLL_SECONDS = 0.05


def fork_zygotes_here() -> None:
    """Fork this process's zygotes rather than spawn them: for a process that holds the
    model's libraries already and whose other threads hold no lock a child could need (a
    service's job process: a fork server's child, with a watcher and a heartbeat thread)."""
    Zygote.start_method = "fork"


def preloads(model: ModelSection) -> bool:
    """Whether the zygote loads this model (else workers load it after the fork): a torch
    kind on the CPU. A model pinned to a GPU would initialise CUDA in the zygote, which no
    forked child can use."""
    device = str(model.options.get("device") or "cpu")
    if device not in ("cpu", "auto"):
        return False
    if model.kind == "object":  # a Python object: loaded first when torch's (objects.py)
        return str(model.options.get("library")) in TORCH_LIBRARIES
    return model.kind in PRELOADED_KINDS


class Zygote:
    """The coordinator's handle on one zygote process: `fork` a worker from it.

    Forking never waits for the zygote: while it loads the model (minutes for a large
    one), the coordinator goes on answering cancels and preemptions. A worker is pending
    until the zygote says its pid; the zygote answers requests in order."""

    start_method: ClassVar[Literal["spawn", "fork"]] = "spawn"  # "fork": `fork_zygotes_here`

    def __init__(self, setup: WorkerSetup, name: str) -> None:
        context: SpawnContext | ForkContext = (
            get_context("fork") if self.start_method == "fork" else get_context("spawn")
        )
        self._control, child = context.Pipe(duplex=True)
        # A forked zygote would keep the coordinator's end open, and never read its end.
        util.register_after_fork(self._control, Connection.close)
        self.process: BaseProcess = context.Process(
            target=zygote_main, args=(setup, child), name=name, daemon=True
        )
        with main_left_behind():
            self.process.start()
        child.close()
        self._pending: deque[ForkedWorker] = deque()
        self._exits: dict[int, int] = {}

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def fork(self, conn: Connection, threads: int) -> ForkedWorker:
        """A worker the zygote will fork, to serve tasks over `conn` (the worker's end of
        its pipe, closed here once handed over) with `threads` threads.

        Raises OSError when the zygote is gone."""
        self._control.send(threads)
        reduction.send_handle(self._control, conn.fileno(), self.process.pid)
        conn.close()  # the zygote has its own copy now; kept open above for a retry
        worker = ForkedWorker(self)
        self._pending.append(worker)
        return worker

    def poll(self, timeout: float = 0.0) -> None:
        """Take in what the zygote has said (forked pids, exit codes), waiting up to
        `timeout` for the first word."""
        with suppress(EOFError, OSError):
            while wait([self._control], timeout):
                message = self._control.recv()
                if message[0] == "forked":
                    self._pending.popleft().started(message[1])
                else:
                    self._exits[message[1]] = message[2]
                timeout = 0.0

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """Worker `pid`'s exit code as the zygote reaped it, waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        while pid not in self._exits and time.monotonic() < deadline and self.alive:
            self.poll(JOIN_POLL_SECONDS)
        return self._exits.get(pid)

    def close(self) -> None:
        """Stop the zygote (its workers were told to stop already). One still loading,
        with forks it has not made, is killed rather than waited for."""
        self._control.close()
        self.process.join(timeout=0 if self._pending else 5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


class ForkedWorker:
    """A worker forked by a zygote, with the face of a multiprocessing Process that the
    local executor uses: a sentinel to wait on, join, kill, exitcode. Until the zygote
    has forked it, its sentinel is the zygote's (the zygote's death is its death)."""

    def __init__(self, zygote: Zygote) -> None:
        self.pid: int | None = None
        self._zygote = zygote
        self._pidfd: int | None = None
        self.exitcode: int | None = None

    def started(self, pid: int) -> None:
        self.pid = pid
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # gone already: a sentinel that is ready at once
            self._pidfd, write_end = os.pipe()
            os.close(write_end)

    @property
    def sentinel(self) -> int:
        if self._pidfd is None:
            self._zygote.poll()
        return self._zygote.process.sentinel if self._pidfd is None else self._pidfd

    def is_alive(self) -> bool:
        return not select.select([self.sentinel], [], [], 0)[0]

    def join(self, timeout: float | None = None) -> None:
        if self.pid is None:
            self._zygote.poll()
        if self.pid is None and timeout is not None:
            return  # not forked yet: nothing of its own to finish
        if wait([self.sentinel], timeout) and self.exitcode is None and self.pid is not None:
            self.exitcode = self._zygote.exit_code(self.pid, timeout or 1.0)

    def kill(self) -> None:
        """Kill the worker. One not forked yet is the zygote still loading: killing the
        zygote is the only way to stop it (only a shutdown kills a worker before its
        READY, and it is ending every worker of that zygote)."""
        if self.pid is None:
            self._zygote.poll()
        if self.pid is None:
            self._zygote.process.kill()
            return
        with suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        if self._pidfd is not None:
            with suppress(OSError):
                os.close(self._pidfd)


def zygote_main(setup: WorkerSetup, control: Connection) -> None:
    """The zygote: load (or import) the model once at one thread, then fork a worker for
    each request, until the coordinator closes the control pipe."""
    from thresher.executors.serve import load_for_worker
    from thresher.models import resolve_loader

    die_with_parent()
    loaded: Any = None  # the model, or why it does not load; None: workers load it
    if preloads(setup.model):
        loaded = load_for_worker(setup, threads=1)
    else:
        with suppress(Exception):  # a kind that does not import fails in each worker
            resolve_loader(setup.model.kind)
    _settle()
    sending = threading.Lock()
    forked = threading.Event()
    threading.Thread(target=_reap, args=(control, sending, forked), daemon=True).start()
    while True:
        try:
            threads = control.recv()
            fd = reduction.recv_handle(control)
        except (EOFError, OSError):
            break
        pid = os.fork()
        if pid == 0:
            control.close()  # the zygote's line to the coordinator is not the worker's
            _worker(setup, Connection(fd), threads, loaded)
        os.close(fd)
        forked.set()
        with sending:
            control.send(("forked", pid))
    os._exit(0)


def _settle() -> None:
    """Before the first fork: give back what loading freed (so no worker inherits it) and
    freeze the loaded objects out of the garbage collector, whose passes would otherwise
    write to every object's header and so copy each shared page into each worker."""
    import ctypes
    import gc

    gc.collect()
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    gc.freeze()


def _worker(setup: WorkerSetup, conn: Connection, threads: int, loaded: Any) -> None:
    """A forked worker: its own thread count, then the task loop, then out."""
    from thresher.executors.serve import serve_tasks
    from thresher.leaving import leave_process

    die_with_parent()  # the zygote is its parent; the coordinator's death ends both
    if loaded is not None and not isinstance(loaded, WorkerBroken):
        _use_threads(threads)
    try:
        serve_tasks(setup, threads, conn.recv, conn.send, loaded)
    finally:
        leave_process()


def _use_threads(threads: int) -> None:
    """Give a forked worker its threads: the zygote loaded the model at one."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


def _reap(control: Connection, sending: threading.Lock, forked: threading.Event) -> None:
    """Reap each worker as it ends and tell the coordinator its exit code."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # no worker yet, or none left: wait for the next fork
            forked.wait()
            forked.clear()
            continue
        with sending, suppress(OSError):
            control.send(("exited", pid, os.waitstatus_to_exitcode(status)))
