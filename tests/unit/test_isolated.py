"""`in_child`: what parses a tenant's file runs in a child process. Its value or its
ThresherError comes back; a child that segfaults, raises something else or takes too
long is an exception here, and this process goes on."""

from __future__ import annotations

import os
import signal
import time

import pytest

from thresher.errors import MonitorError
from thresher.monitor.part_reader import PartTooLarge
from thresher.service.background.isolated import ChildFailed, in_child


def _segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def _too_large(message: str) -> None:
    raise PartTooLarge(message)


def _not_ours() -> None:
    raise KeyError("surprise")


def _pid() -> int:
    return os.getpid()


def test_a_value_and_an_error_come_back_from_the_child() -> None:
    assert in_child(_pid, timeout=60) != os.getpid()
    with pytest.raises(PartTooLarge, match="over the cap") as caught:
        in_child(_too_large, "over the cap", timeout=60)
    assert isinstance(caught.value, MonitorError)


def test_a_child_that_segfaults_is_an_exception_here_and_this_process_goes_on() -> None:
    with pytest.raises(ChildFailed) as caught:
        in_child(_segfault, timeout=60)
    assert caught.value.crashed
    assert str(caught.value) == "was killed by signal 11 (SIGSEGV)"
    with pytest.raises(ChildFailed, match="KeyError: 'surprise'") as other:
        in_child(_not_ours, timeout=60)
    assert not other.value.crashed
    assert in_child(_pid, timeout=60) > 0  # and the next call is served


def test_a_child_with_no_answer_in_time_is_ended() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        in_child(time.sleep, 60, timeout=1)
    assert time.monotonic() - started < 30
