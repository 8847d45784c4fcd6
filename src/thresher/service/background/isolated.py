"""Whatever parses what a tenant sent runs in a child process, never in the server's.

A native reader can crash on hostile input (a JSON line nested 20,000 deep overflowed
pyarrow's C stack, SIGSEGV), and a small compressed file can hold millions of rows. In
the server process the first took every tenant's service down, the second its memory.
`in_child` runs one call in a child from the service's fork server (pyarrow and the
store already imported: it starts in milliseconds), waits for its answer, and ends it:
a crash, an error that is not thresher's, or no answer in time is an exception in the
server, which goes on serving, and what the child read dies with it.

Its users: the columns of a submission's input (`input_columns`, before a job is
queued) and a part of actuals from an uploaded file (`routers/quality.py`). A new kind of
tenant file the server must read goes through here too.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from thresher.children import describe_exit, die_with_parent
from thresher.errors import SourceError, ThresherError
from thresher.service.background.job_process import children_context
from thresher.spec import SourceSection

__all__ = ["ChildFailed", "in_child", "input_columns"]

T = TypeVar("T")

# How long a submission waits for its input's columns before leaving the check to the job.
PROBE_SECONDS = 30.0


class ChildFailed(ThresherError):
    """The child ended without an answer. `crashed`: it died (the message says how:
    "was killed by signal 11 (SIGSEGV)"); else it raised an error that is not
    thresher's (the message: its type and text)."""

    stage = "read"

    def __init__(self, message: str, crashed: bool) -> None:
        super().__init__(message)
        self.crashed = crashed


def in_child(target: Callable[..., T], *args: Any, timeout: float) -> T:
    """`target(*args)`, run in a child process: its value (which must pickle), or the
    ThresherError it raised, raised here. ChildFailed when the child died without an
    answer (`describe_exit` says how) or raised another error; TimeoutError when it gave
    none within `timeout` seconds (the child is killed)."""
    receiver, sender = children_context.Pipe(duplex=False)
    process = children_context.Process(target=_answer, args=(target, args, sender), daemon=True)
    process.start()
    sender.close()
    try:
        answer = receiver.recv() if receiver.poll(timeout) else None
    except EOFError:  # it died without a word
        answer = ("crash", None)
    finally:
        receiver.close()
        if process.is_alive():
            process.kill()
        process.join()
    if answer is None:
        raise TimeoutError(f"no answer within {timeout:g} s")
    kind, value = answer
    if kind == "crash":
        raise ChildFailed(describe_exit(process.exitcode), crashed=True)
    if kind == "failed":
        raise ChildFailed(value, crashed=False)
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]


def _answer(target: Callable[..., Any], args: tuple[Any, ...], sender: Connection) -> None:
    """The child: call, and send back ("value", v), ("error", a ThresherError) or
    ("failed", "its type: text")."""
    die_with_parent()
    try:
        answer: tuple[str, Any] = ("value", target(*args))
    except ThresherError as exc:
        answer = ("error", exc if _pickles(exc) else ThresherError(str(exc), stage=exc.stage))
    except Exception as exc:  # a reader's own error: the input is not what it claims
        answer = ("failed", f"{type(exc).__name__}: {exc}")
    sender.send(answer)
    sender.close()


def _pickles(exc: BaseException) -> bool:
    """Whether `exc` comes back whole from a pickle (an error class whose constructor
    takes other arguments than its message does not)."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return True


def input_columns(section: SourceSection, timeout: float = PROBE_SECONDS) -> list[str] | None:
    """The column names of the input `section` names, read (planned) in a child process;
    None when it cannot tell within `timeout` seconds (the job's planner checks again).
    SourceError when the input cannot be read, or crashed the reader."""
    try:
        return in_child(_columns, section, timeout=timeout)
    except TimeoutError:
        return None
    except ChildFailed as exc:
        if exc.crashed:
            raise SourceError(
                f"source.uri: reading the input crashed its reader (it {exc})"
            ) from None
        raise SourceError(f"source.uri: cannot read the input: {exc}") from None


def _columns(section: SourceSection) -> list[str]:
    from thresher.sources import open_source

    return list(open_source(section).plan().schema.names)
