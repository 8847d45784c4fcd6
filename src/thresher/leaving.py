"""Ending a process once its work is done, without tearing its interpreter down.

A worker's shards are committed or reported, a command's job is recorded and its files
closed: what Python would do next — free every module and object, then let the native
libraries' static destructors run — changes nothing the user sees, yet it costs time
(torch's teardown: 1.3 s) and can crash. Arrow's thread pools torn down at exit abort a
process now and then with "terminate called without an active exception"
(apache/arrow#34314): a job that wrote every row would end with exit status -6. Workers
(`leave_process`) and the `thresher` command (`leave_when_done`) leave with `os._exit`
after the exit steps that matter have run.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
from typing import NoReturn

__all__ = ["ended", "exit_status", "leave", "leave_process", "leave_when_done"]


def leave(status: int) -> NoReturn:
    """Flush what is buffered (log handlers, Python's stdout and stderr, and C's stdio,
    which a model's native code may have written to) and end the process now. Output
    that cannot be written is an error, status 120 as Python's own exit gives it; a
    reader that went away (a closed pipe) is not."""
    # logging is not imported here: that would register its exit handler before the
    # command's own (`leave_when_done`), and Python would never run it
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a closed pipe, or a closed stream
            pass
        except OSError:
            status = status or 120
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)  # every C stdio stream; exit() would have
    os._exit(status)


def leave_process() -> NoReturn:
    """End a worker process. Multiprocessing's own exit steps run first, so the
    semaphores a library made (tqdm's lock) are unlinked, not leaked."""
    from multiprocessing import util

    util._exit_function()  # type: ignore[attr-defined]
    leave(0)


class _Command:
    status: int | None = None  # set when the command ended by SystemExit


def leave_when_done() -> None:
    """Called first thing by the command's entry point; `ended(status)` records how the
    command ended. At exit, after Python has joined the threads and run every exit handler
    registered after this one (Ray's shutdown, multiprocessing's), the process leaves with
    that status. A command that ended by an uncaught exception is left to Python's usual
    exit, which reports it."""
    atexit.register(_leave_if_ended)  # registered first, so it runs last


def ended(status: object) -> None:
    """The command ended by `SystemExit(status)`."""
    _Command.status = exit_status(status)


def exit_status(code: object) -> int:
    """The status `sys.exit(code)` gives: None is 0, an int itself, anything else (a
    message, which Python prints) 1.

    >>> exit_status(None), exit_status(2), exit_status("thresher: no such job")
    (0, 2, 1)
    """
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


def _leave_if_ended() -> None:
    if _Command.status is not None:
        # `logging` registers its own handler (flush and close every log handler) when
        # first imported, which `import thresher` does: before this one, so it would be
        # skipped. It is run here instead.
        if "logging" in sys.modules:
            sys.modules["logging"].shutdown()
        leave(_Command.status)
