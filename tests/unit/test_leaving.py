"""How the `thresher` command and its workers end: exit handlers run, the status is the
command's, buffered output is written, and the interpreter is not torn down."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from thresher.leaving import exit_status

pytestmark = pytest.mark.unit

# A command in the shape of cli.main: an exit handler registered during the command (as
# Ray's and multiprocessing's are), buffered output, and an object whose finalizer only
# an interpreter teardown would run.
COMMAND = """
import atexit, sys
from thresher.leaving import ended, leave_when_done

class TornDown:
    def __del__(self):
        print("torn down", flush=True)

leave_when_done()
kept = TornDown()
atexit.register(lambda: print("exit handler ran"))
sys.stdout.write("buffered, not flushed")
try:
    raise SystemExit({code!r})
except SystemExit as exc:
    ended(exc.code)
    raise
"""


@pytest.mark.parametrize(("code", "status"), [(None, 0), (3, 3), ("no such job", 1)])
def test_a_command_leaves_with_its_status_after_its_exit_handlers(
    code: object, status: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(COMMAND.format(code=code))],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == status
    assert done.stdout == "buffered, not flushedexit handler ran\n"  # no "torn down"
    assert done.stderr == ("no such job\n" if isinstance(code, str) else "")


def test_a_command_that_raised_is_left_to_python_to_report() -> None:
    raised = "from thresher.leaving import leave_when_done\nleave_when_done()\n1 / 0\n"
    done = subprocess.run(
        [sys.executable, "-c", raised], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "ZeroDivisionError" in done.stderr


def test_exit_status_is_what_sys_exit_gives() -> None:
    assert [exit_status(c) for c in (None, 0, 2, "a message", 1.5)] == [0, 0, 2, 1, 1]


def test_no_exit_handler_is_registered_before_the_command_s_own() -> None:
    """Handlers registered before `leave_when_done` would be skipped; importing the
    command's module must register none (its imports are lazy) but logging's, which
    `leave_when_done`'s handler runs itself."""
    check = (
        "import atexit, logging; n = atexit._ncallbacks(); import thresher.cli;"
        " print(atexit._ncallbacks() - n)"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], check=True, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "0"
