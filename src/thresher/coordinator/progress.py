"""Telling a person how the job goes: a live bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:  # rich is imported for a terminal's bar only: log lines need none of it
    from rich.console import Console
    from rich.progress import TaskID


class Reporter(Protocol):
    """What the coordinator tells as a job runs."""

    def planned(self, job_id: str, shards: int, rows: int | None, placement: str) -> None: ...

    def advance(self, rows: int) -> None: ...

    def shard_done(self) -> None: ...

    def note(self, message: str) -> None: ...

    def close(self) -> None: ...


class QuietReporter:
    """Says nothing (the Python API's default)."""

    def planned(self, job_id: str, shards: int, rows: int | None, placement: str) -> None:
        pass

    def advance(self, rows: int) -> None:
        pass

    def shard_done(self) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass


class LogReporter:
    """Plain log lines on a stream, at most one progress line every `every` seconds."""

    def __init__(self, stream: TextIO = sys.stderr, every: float = 5.0) -> None:
        self._stream, self._every = stream, every
        self._rows = self._shards_done = self._shards = 0
        self._total: int | None = None
        self._started = self._last = time.monotonic()

    def planned(self, job_id: str, shards: int, rows: int | None, placement: str) -> None:
        self._shards, self._total = shards, rows
        known = f"{rows:,} rows" if rows is not None else "rows counted as read"
        self._line(f"job {job_id}: {shards} shard(s), {known}, {placement}")

    def advance(self, rows: int) -> None:
        self._rows += rows
        now = time.monotonic()
        if now - self._last >= self._every:
            self._last = now
            rate = self._rows / max(now - self._started, 1e-9)
            shards = f"{self._shards_done}/{self._shards} shards"
            self._line(f"{self._rows:,} rows, {shards}, {rate:,.0f} rows/s")

    def shard_done(self) -> None:
        self._shards_done += 1

    def note(self, message: str) -> None:
        self._line(message)

    def close(self) -> None:
        pass

    def _line(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} thresher: {text}", file=self._stream, flush=True)


class BarReporter:
    """A rich progress bar with rows/s and ETA (by rows when known, else by shards)."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self._console,
            transient=False,
        )
        self._task: TaskID | None = None
        self._by_rows = False
        self._rows = 0
        self._started = time.monotonic()

    def planned(self, job_id: str, shards: int, rows: int | None, placement: str) -> None:
        self._console.print(f"job [bold]{job_id}[/]: {shards} shard(s), {placement}")
        self._by_rows = rows is not None
        total: Any = rows if rows is not None else shards
        self._progress.start()
        self._task = self._progress.add_task(
            "rows" if self._by_rows else "shards", total=total, rate=""
        )
        self._started = time.monotonic()

    def advance(self, rows: int) -> None:
        self._rows += rows
        if self._task is None:
            return
        rate = f"{self._rows / max(time.monotonic() - self._started, 1e-9):,.0f} rows/s"
        self._progress.update(self._task, advance=rows if self._by_rows else 0, rate=rate)

    def shard_done(self) -> None:
        if self._task is not None and not self._by_rows:
            self._progress.update(self._task, advance=1)

    def note(self, message: str) -> None:
        self._console.print(message)

    def close(self) -> None:
        self._progress.stop()


class NotebookReporter:
    """A tqdm bar (rows, rows/s, ETA) where a notebook shows it: tqdm's widget in Jupyter
    when ipywidgets is installed, else its text bar, which a notebook redraws in place
    (rich's live display needs the widgets to redraw at all)."""

    def __init__(self) -> None:
        from tqdm.auto import tqdm

        self._tqdm = tqdm
        self._bar: Any = None
        self._by_rows = False

    def planned(self, job_id: str, shards: int, rows: int | None, placement: str) -> None:
        self._by_rows = rows is not None
        self._bar = self._tqdm(
            total=rows if rows is not None else shards,
            desc=f"job {job_id}",
            unit=" rows" if self._by_rows else " shards",
            unit_scale=self._by_rows,
        )

    def advance(self, rows: int) -> None:
        if self._bar is not None and self._by_rows:
            self._bar.update(rows)

    def shard_done(self) -> None:
        if self._bar is not None and not self._by_rows:
            self._bar.update(1)

    def note(self, message: str) -> None:
        (self._bar.write if self._bar is not None else print)(message)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def reporter_for(stream: TextIO = sys.stderr) -> Reporter:
    """A bar on a terminal, log lines anywhere else."""
    return BarReporter() if stream.isatty() else LogReporter(stream)
