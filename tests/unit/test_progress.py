"""How a job tells a person it goes: log lines anywhere but a terminal, a rich bar there."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from rich.console import Console

from thresher.coordinator.progress import BarReporter, LogReporter, reporter_for

pytestmark = pytest.mark.unit


def test_log_lines_name_the_job_its_placement_and_progress() -> None:
    stream = io.StringIO()
    reporter = reporter_for(stream)
    assert isinstance(reporter, LogReporter)
    reporter = LogReporter(stream, every=0.0)
    reporter.planned("job-1", 2, 1000, "2 worker(s) x 1 thread(s)")
    reporter.advance(500)
    reporter.note("a note")
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith(
        "thresher: job job-1: 2 shard(s), 1,000 rows, 2 worker(s) x 1 thread(s)"
    )
    assert "500 rows, 0/2 shards" in lines[1] and lines[2].endswith("a note")


def test_a_bar_on_a_terminal_counts_rows() -> None:
    screen = io.StringIO()
    reporter = BarReporter(
        Console(file=screen, force_terminal=True, no_color=True, highlight=False, width=100)
    )
    reporter.planned("job-1", 2, 1000, "1 worker in this process x 2 thread(s)")
    reporter.advance(1000)
    reporter.shard_done()
    reporter.close()
    shown = screen.getvalue()
    assert "job-1" in shown and "1000/1000" in shown and "rows/s" in shown


def test_a_run_without_a_terminal_does_not_import_rich() -> None:
    """rich costs a CLI run ~17 ms of start-up; only the bar needs it."""
    code = (
        "import sys, thresher.coordinator.progress as p;"
        " p.reporter_for(sys.stderr); print('rich' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )  # stderr is a pipe here, not a terminal
    assert done.stdout.strip() == "False"
