"""Child processes that die with their parent, and how to say how one ended.

Workers and the service's job processes both run work a parent supervises; neither may
outlive it (a killed coordinator must leave nothing writing behind a resume's back).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import wait


def die_with_parent() -> None:
    """End this process when the process that started it dies: on Linux the kernel kills
    it when its parent dies (`PR_SET_PDEATHSIG`), and a watcher thread ends it when the
    starting process's sentinel closes — the one that counts for a forkserver child, whose
    parent (the fork server) outlives the process that asked for it."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        with suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    parent = mp.parent_process()
    if parent is None:
        return
    if not parent.is_alive():  # it died before any of this took effect
        os._exit(1)
    threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True).start()


def _exit_with(sentinel: int) -> None:
    wait([sentinel])
    os._exit(1)


def describe_exit(exitcode: int | None) -> str:
    """How a process ended, in words, from its multiprocessing exit code.

    >>> describe_exit(-11)
    'was killed by signal 11 (SIGSEGV)'
    >>> describe_exit(3)
    'exited with status 3'
    """
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-exitcode} ({name})"
    return f"exited with status {exitcode}"


@contextmanager
def child_environment(variables: dict[str, str]) -> Iterator[None]:
    """`variables` set in this process's environment while a child starts, then restored:
    children read what they are given (BLAS/OpenMP thread limits, the GPUs they may use,
    the modules a fork server imports) from the environment they start with."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_STARTING = threading.Lock()


@contextmanager
def main_left_behind() -> Iterator[None]:
    """A spawned child started without the caller's main module.

    A spawned child imports the parent's `__main__` again before it runs anything, as
    `__mp_main__`: a script without an `if __name__ == "__main__":` guard (a notebook
    saved as a script) runs again in every child, training its model again and starting
    jobs of its own; `python - < script.py` and `python -c` cannot be imported at all.
    thresher's children run thresher's code and receive everything else pickled, so
    they need none of it: while a child starts, `__main__` is a blank module (what
    `multiprocessing` reads to prepare the child), then the caller's again. The caller's
    own classes and functions reach workers by value (cloudpickle), not by import."""
    import types

    with _STARTING:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is not None:
                sys.modules["__main__"] = main
