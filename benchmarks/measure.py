"""Measuring a command from the outside: wall time, time to first output, peak memory.

Every system in the benchmarks runs as a subprocess under `/usr/bin/time -v` and is measured
the same way: wall seconds from start to exit, the moment the first output file appears in
its output folder (polled), the peak summed RSS of its whole process tree (sampled from
/proc every 50 ms), and the largest single process's max RSS as `time -v` reports it.
Asked for, the peak summed PSS too: pages shared between processes (a forked worker's
libraries and weights) counted once across the tree, not once per process.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

POLL_SECONDS = 0.05
_MAX_RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


@dataclass(frozen=True)
class Measured:
    """What one command cost, seen from outside it."""

    seconds: float
    first_output: float | None  # seconds from start until the first output file appeared
    peak_tree_rss: int  # bytes, summed over the process tree, sampled
    max_rss: int  # bytes, the largest single process (time -v)
    stdout: str
    stderr: str
    peak_tree_pss: int | None = None  # bytes, summed over the tree, when asked for


def process_tree(pid: int) -> dict[int, int]:
    """`pid` and all its descendants, each with its RSS in bytes, from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * page
    tree, stack = {}, [pid]
    while stack:
        p = stack.pop()
        tree[p] = rss.get(p, 0)
        stack.extend(children.get(p, []))
    return tree


def tree_pss(pids: Iterable[int]) -> int:
    """Summed PSS in bytes of `pids` (each shared page divided among the processes that
    map it), from /proc/*/smaps_rollup."""
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except OSError:
            continue
    return total


class _Sampler(threading.Thread):
    """Samples tree RSS and watches for the first output file until told to stop."""

    def __init__(
        self, pid: int, started: float, watch: Path | None, pattern: str, pss: bool
    ) -> None:
        super().__init__(daemon=True)
        self.pid, self.started, self.watch, self.pattern = pid, started, watch, pattern
        self.pss = pss
        self.peak = 0
        self.peak_pss = 0
        self.first_output: float | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            tree = process_tree(self.pid)
            self.peak = max(self.peak, sum(tree.values()))
            if self.pss:
                self.peak_pss = max(self.peak_pss, tree_pss(tree))
            if self.first_output is None and self._output_exists():
                self.first_output = time.perf_counter() - self.started
            time.sleep(POLL_SECONDS)

    def _output_exists(self) -> bool:
        return self.watch is not None and any(self.watch.glob(self.pattern))


def run_measured(
    cmd: Sequence[str],
    env: dict[str, str] | None = None,
    watch: Path | None = None,
    pattern: str = "*.parquet",
    pss: bool = False,
    *,
    sample: bool = True,
) -> Measured:
    """Run `cmd` under `/usr/bin/time -v`; raise SystemExit with its output if it fails.

    `watch` is the folder whose first file matching `pattern` marks the first output;
    `pss` samples the tree's PSS as well. `sample=False` runs no sampler (no first
    output, no tree RSS): for a figure that needs neither, on a machine of few cores,
    where the sampler's /proc walk every 50 ms takes turns from the command.
    """
    started = time.perf_counter()
    proc = subprocess.Popen(
        ["/usr/bin/time", "-v", *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    sampler = _Sampler(proc.pid, started, watch, pattern, pss)
    if sample:
        sampler.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - started
    sampler.done.set()
    if sample:
        sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out}\n{err[-4000:]}")
    found = _MAX_RSS.search(err)
    max_rss = int(found[1]) * 1024 if found else 0
    peak_pss = sampler.peak_pss if pss else None
    return Measured(seconds, sampler.first_output, sampler.peak, max_rss, out, err, peak_pss)
