"""`thresher run --json` for a script: the job as events, one JSON object per line on
stdout, and nothing else there (the log lines or the bar go to stderr).

    {"event": "started", "job_id": "20261130-020304-a1b2c3", "shards": 5, "rows": 2000, ...}
    {"event": "ended", "job_id": "20261130-020304-a1b2c3", "state": "succeeded", ...}

`started` comes as soon as the job is recorded and planned, before any shard runs, so a
script can watch or cancel it by its id; `ended` is always the last line, also when the
job could not start (then `job_id` is null, unless `started` came first).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from thresher.coordinator.job import JobResult
from thresher.coordinator.progress import Reporter
from thresher.postgres import without_password
from thresher.store import JobState


class EventReporter:
    """Prints the `started` event on `out` when the coordinator has planned the job, and
    tells everything (the plan too) to `log`, which writes to stderr; `ended` or
    `stopped` prints the last event."""

    def __init__(self, log: Reporter, out: TextIO) -> None:
        self._log, self._out = log, out
        self.job_id: str | None = None

    def planned(self, job_id: str, shards: int, rows: int | None, placement: str) -> None:
        self.job_id = job_id
        emit(
            self._out,
            {
                "event": "started",
                "job_id": job_id,
                "shards": shards,
                "rows": rows,
                "placement": placement,
            },
        )
        self._log.planned(job_id, shards, rows, placement)

    def advance(self, rows: int) -> None:
        self._log.advance(rows)

    def shard_done(self) -> None:
        self._log.shard_done()

    def note(self, message: str) -> None:
        self._log.note(message)

    def close(self) -> None:
        self._log.close()

    def ended(self, result: JobResult) -> None:
        """Print the `ended` event of `result`."""
        emit(self._out, ended_event(result))

    def stopped(self, problems: list[str]) -> None:
        """Print the `ended` event of a job that stopped with an error instead of a
        result: its id if it was recorded (and `started` told), else null."""
        emit(self._out, failed_event(self.job_id, problems))


def ended_event(result: JobResult) -> dict[str, Any]:
    """How the job ended: its state, where its output and bad records are, its problems
    and its manifest (as `_SUCCESS` holds it when the job succeeded)."""
    return {
        "event": "ended",
        "job_id": result.job_id,
        "state": result.state.value,
        "succeeded": result.succeeded,
        "output": without_password(result.output),
        "errors_uri": without_password(result.errors_uri),
        "problems": result.problems,
        "manifest": result.manifest,
    }


def failed_event(job_id: str | None, problems: list[str]) -> dict[str, Any]:
    """The `ended` event of a job that stopped with an error instead of a result (a spec
    the input does not fit, a worker that could not start): `job_id` is null when no job
    was recorded."""
    return {
        "event": "ended",
        "job_id": job_id,
        "state": JobState.FAILED.value,
        "succeeded": False,
        "output": None,
        "errors_uri": None,
        "problems": problems,
        "manifest": None,
    }


def event_stream() -> TextIO:
    """Standard output, kept for the events alone: file descriptor 1 is pointed at stderr,
    so whatever else would print there (a model's `print`, a native library, a worker
    process, which inherits the descriptor) cannot land between two events."""
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(kept, "w", encoding="utf-8")


def emit(out: TextIO, event: dict[str, Any]) -> None:
    """One event as one line, flushed at once: a script reads it while the job runs."""
    out.write(json.dumps(event) + "\n")
    out.flush()
