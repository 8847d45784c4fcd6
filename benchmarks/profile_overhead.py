"""What `[monitor] profile = true` (the default) costs: the same `thresher run` of the
tabular (LightGBM) and MLP (ONNX) workloads with profiling on and off, taking turns, best
of N each, end to end (process start to exit); and, less at the mercy of a busy machine,
the CPU time the workers spent profiling (the manifest's `profile.cpu_seconds`)
as a share of the whole process tree's. Also the size of the job's stored profile.

    python benchmarks/profile_overhead.py [--quick] [--repeat 5] [--dir DIR]

Writes benchmarks/results/profile-overhead.md (figures go there, never into docstrings).
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import statistics
from dataclasses import dataclass
from pathlib import Path

import systems
from ab import SideRun
from measure import run_measured
from report import write_results
from workloads import Workload, prepare

WORKLOADS = ("tabular", "mlp")


@dataclass(frozen=True)
class Run:
    seconds: float  # end to end
    cpu: float  # user + system, the whole process tree
    user: float  # user alone: on a shared host the system time swings with its memory
    profiling_cpu: float  # what the workers spent profiling (the manifest's figure)


def one_run(spec: Path, env: dict[str, str], out: Path, profile: bool) -> Run:
    systems._fresh(out)
    flag = "true" if profile else "false"
    # run.workers pinned: with it unset, thresher picks threads or processes by what the
    # store measured of the model's earlier jobs, and on and off would not run alike.
    workers = f"run.workers={os.cpu_count() or 1}"
    cmd = [systems.THRESHER, "run", str(spec), "--set", f"monitor.profile={flag}"]
    cmd += ["--set", workers]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # No sampler: this figure needs no memory, and on a two-core machine the sampler's
    # turns fell on one side or the other.
    measured = run_measured(cmd, env, sample=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user = after.ru_utime - before.ru_utime
    cpu = user + (after.ru_stime - before.ru_stime)
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert ("profile" in manifest) == profile, "the manifest says otherwise"
    profiling = manifest["profile"]["cpu_seconds"] if profile else 0.0
    return Run(measured.seconds, cpu, user, profiling)


def profile_bytes(root: Path) -> int:
    """The stored size of the newest job profile."""
    with sqlite3.connect(root / "store.db") as db:
        row = db.execute(
            "SELECT LENGTH(p.profile) FROM thresher_profiles p JOIN thresher_jobs j"
            " ON j.id = p.subject ORDER BY j.created_at DESC LIMIT 1"
        ).fetchone()
    return int(row[0])


@dataclass(frozen=True)
class Overhead:
    workload: Workload
    runs: dict[bool, list[Run]]
    profile_bytes: int

    @property
    def on(self) -> list[float]:
        return [r.seconds for r in self.runs[True]]

    @property
    def off(self) -> list[float]:
        return [r.seconds for r in self.runs[False]]

    @property
    def cpu_share(self) -> float:
        """Profiling's share of the profiled runs' CPU time (median over the runs): the
        figure a busy machine's wall-clock noise does not drown."""
        return statistics.median(r.profiling_cpu / r.cpu for r in self.runs[True])

    @property
    def cpu_ratio(self) -> float:
        """The whole tree's CPU time on ÷ off (medians): everything profiling costs,
        its own calls and what its memory traffic takes from the rest, on a machine
        whose wall clock is noisy."""
        on, off = ([r.cpu for r in self.runs[p]] for p in (True, False))
        return statistics.median(on) / statistics.median(off)

    @property
    def user_ratio(self) -> float:
        """The tree's user CPU time on ÷ off (medians): the same without the system time,
        which on a shared virtual machine swung by seconds between like runs."""
        on, off = ([r.user for r in self.runs[p]] for p in (True, False))
        return statistics.median(on) / statistics.median(off)

    @property
    def best(self) -> float:
        return min(self.on) / min(self.off)

    @property
    def median(self) -> float:
        return statistics.median(self.on) / statistics.median(self.off)

    @property
    def paired(self) -> float:
        """The median of each pair's on ÷ off (the two runs of a pair follow each other,
        so a host that slows for a minute slows both): the ratio least at the mercy of a
        shared machine's drift."""
        return statistics.median(a / b for a, b in zip(self.on, self.off, strict=True))


def measure(name: str, root: Path, quick: bool, repeat: int) -> Overhead:
    workload = prepare(name, root, quick)
    env, spec, out = systems.side_job(workload, root, "profile")
    times: dict[bool, list[Run]] = {True: [], False: []}
    size = 0
    for profile in (True, False):  # untimed: the first runs fill the page cache and the
        one_run(spec, env, out, profile)  # compiled trees' cache, as a nightly job finds them
    for attempt in range(repeat):
        for profile in (attempt % 2 == 0, attempt % 2 == 1):  # who goes first alternates
            times[profile].append(one_run(spec, env, out, profile))
            if profile:
                size = profile_bytes(root)
        on, off = times[True][-1], times[False][-1]
        print(f"[{name}] run {attempt + 1}: on {on.seconds:.2f} s ({on.profiling_cpu:.2f} of"
              f" {on.cpu:.1f} CPU-s profiling), off {off.seconds:.2f} s ({off.cpu:.1f} CPU-s)",
              flush=True)  # fmt: skip
    return Overhead(workload, times, size)


def main() -> None:
    side = SideRun.parse(__doc__, "profile")
    args, root = side.args, side.root
    found = [measure(name, root, args.quick, args.repeat) for name in WORKLOADS]
    lines = [
        *side.heading("Profiling overhead", "profile_overhead.py"),
        "",
        "`thresher run` end to end (process start to exit) with `[monitor] profile` on "
        "and off, taking turns after an untimed run of each; the target is on ÷ off ≤ "
        "1.02. Paired: the median of each attempt's on ÷ off, its two runs one after the "
        "other (the runs below, in order), which a host's slow minutes touch alike. The "
        "profiling CPU share is the CPU time the workers spent in the profiler "
        "(`thread_time`, in the manifest's `profile.cpu_seconds`) over the whole process "
        "tree's CPU time, median of the runs; the tree's CPU on ÷ off counts what its "
        "memory traffic costs the rest too, and the user CPU on ÷ off the same without "
        "the system's time. All of profiling runs in the profiler (Arrow's counts per "
        "chunk, the sample sketched per shard: `thresher/profiles/profiler.py`), so the "
        "profiling share counts all of its own work; the tree's CPU what it costs the "
        "rest.",
        "",
        "| workload | rows | on, best (s) | off, best (s) | on ÷ off, best | on ÷ off, median |"
        " on ÷ off, paired | profiling CPU share | tree CPU on ÷ off | user CPU on ÷ off |"
        " profile stored |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in found:
        w = f.workload
        lines.append(
            f"| {w.name}: {w.title} | {w.rows:,} | {min(f.on):.2f} | {min(f.off):.2f} |"
            f" {f.best:.3f} | {f.median:.3f} | {f.paired:.3f} | {f.cpu_share:.1%} |"
            f" {f.cpu_ratio:.3f} |"
            f" {f.user_ratio:.3f} |"
            f" {f.profile_bytes / 1024:.0f} KiB |"
        )
    lines += ["", "All runs (s):"]
    for f in found:
        on, off = (", ".join(f"{t:.2f}" for t in ts) for ts in (f.on, f.off))
        lines.append(f"- {f.workload.name}: on {on}; off {off}")
    write_results("profile-overhead", lines, args.quick)


if __name__ == "__main__":
    main()
