"""Threads or processes: the same `thresher run` of a job of several shards, its worker
either a process per core (one compute thread each, forked from one model load) or one
worker in the CLI's own process using every core as threads; and which one thresher
chose once it had measured both (plan/history.py).

The way is set through the job store, as thresher sets it: a store with no earlier job of
the model runs processes (the planner's rule); a store holding one such job tries threads
(both start from a store whose tables exist, so neither pays for making them);
the store left after both holds the two measurements, and the next run's placement line
says which it took. End to end, process start to exit, taking turns, best of N.

    python benchmarks/threads_or_processes.py [--quick] [--repeat 3] [--dir DIR]

Writes benchmarks/results/threads-or-processes.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.parquet as pq
import systems
from measure import run_measured
from report import write_results
from workloads import Workload, prepare

WORKLOADS = ("tabular", "mlp", "mlp-small", "minilm")
TEXT_ROWS = {False: 4_000, True: 1_000}  # MiniLM: 30 s a run on two cores, not 80


@dataclass(frozen=True)
class Compared:
    workload: Workload
    processes: list[float]
    threads: list[float]
    chosen: str  # the measured run's placement line

    @property
    def ratio(self) -> float:
        """Threads' throughput over processes', best runs."""
        return min(self.processes) / min(self.threads)


def workload_for(name: str, root: Path, quick: bool) -> Workload:
    """The benchmark's workload; `mlp-small` is the MLP at the quick size (200,000 rows),
    and MiniLM is cut to a few thousand texts in two files, so it has two shards."""
    if name == "mlp-small":
        return replace(prepare("mlp", root, True), name="mlp-small")
    workload = prepare(name, root, quick)
    if name != "minilm":
        return workload
    rows = TEXT_ROWS[quick]
    folder = root / f"text-{rows}-in-two"
    if not folder.exists():
        folder.mkdir()
        table = pq.read_table(workload.data).slice(0, rows)
        for half in range(2):
            pq.write_table(table.slice(half * rows // 2, rows // 2), folder / f"{half}.parquet")
    return replace(workload, data=str(folder / "*.parquet"), rows=rows)


def one_run(spec: Path, env: dict[str, str], out: Path) -> tuple[float, dict]:
    shutil.rmtree(out, ignore_errors=True)
    measured = run_measured([systems.THRESHER, "run", str(spec)], env, out, "part-*.parquet")
    return measured.seconds, json.loads((out / "_SUCCESS").read_text())


def compare(name: str, root: Path, quick: bool, repeat: int) -> Compared:
    workload = workload_for(name, root, quick)
    env, spec, out = systems.side_job(workload, root, "placement")
    store, seeded = root / f"{name}-placement.db", root / f"{name}-seeded.db"
    empty = root / f"{name}-empty.db"
    env["THRESHER_STORE"] = f"sqlite:///{store}"
    store.unlink(missing_ok=True)
    one_run(spec, env, out)  # the model's first job on this store: processes, recorded
    shutil.copy(store, seeded)
    with closing(sqlite3.connect(store)) as db, db:  # no job, the tables made: no history
        db.execute("DELETE FROM thresher_jobs")
    shutil.copy(store, empty)
    times: dict[bool, list[float]] = {True: [], False: []}
    for attempt in range(repeat):
        for threads in (attempt % 2 == 0, attempt % 2 == 1):  # who goes first alternates
            # One processes run measured: this one tries threads; none: processes.
            shutil.copy(seeded if threads else empty, store)
            seconds, manifest = one_run(spec, env, out)
            assert manifest["worker_in_process"] is threads, manifest["placement"]
            times[threads].append(seconds)
        print(f"[{name}] run {attempt + 1}: threads {times[True][-1]:.2f} s,"
              f" processes {times[False][-1]:.2f} s", flush=True)  # fmt: skip
    # After a threads run the store holds one job each way: what does the next take?
    shutil.copy(seeded, store)
    one_run(spec, env, out)
    _, manifest = one_run(spec, env, out)
    return Compared(workload, times[False], times[True], manifest["placement"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, a few minutes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--only", action="append", choices=WORKLOADS, help="one workload")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="thresher-placement-"))
    root.mkdir(parents=True, exist_ok=True)
    started, load = time.time(), os.getloadavg()[0]
    found = [compare(name, root, args.quick, args.repeat) for name in args.only or WORKLOADS]
    lines = [
        f"# Threads or processes{' (--quick)' if args.quick else ''}",
        "",
        f"`python benchmarks/threads_or_processes.py{' --quick' if args.quick else ''}"
        f" --repeat {args.repeat}`, run {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}"
        f" on {os.cpu_count()} cores; load average (1 min) {load:.1f} at the start,"
        f" {os.getloadavg()[0]:.1f} at the end.",
        "",
        "`thresher run` end to end (process start to exit), best of the runs, taking turns:"
        " processes (a worker per core, forked from one model load) against threads (one"
        " worker in the CLI's process, every core a compute thread). The last column is"
        " the placement thresher chose on the run after it had measured one job each way.",
        "",
        "| workload | rows | processes, best (s) | threads, best (s) | threads ÷ processes"
        " throughput | chosen after measuring both |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for f in found:
        w = f.workload
        lines.append(
            f"| {w.name}: {w.title} | {w.rows:,} | {min(f.processes):.2f} |"
            f" {min(f.threads):.2f} | {f.ratio:.2f} | {f.chosen} |"
        )
    lines += ["", "All runs (s):"]
    for f in found:
        runs = (", ".join(f"{t:.2f}" for t in ts) for ts in (f.processes, f.threads))
        lines.append(f"- {f.workload.name}: processes {next(runs)}; threads {next(runs)}")
    write_results("threads-or-processes", lines, args.quick)


if __name__ == "__main__":
    main()
