"""Whether onnxruntime's intra-op threads should spin between batches: the MLP workload's
`thresher run` with `model.options.spinning` true and false, taking turns, in the
placements a job of it gets — one worker of 2 threads (what `auto` picks for it on 2
cores) and 2 workers of 1 thread (no intra-op thread to spin: the control) — best and
median of N end to end, and the process tree's user and system CPU time.

    python benchmarks/onnx_spinning.py [--quick] [--repeat 5] [--dir DIR]

Writes benchmarks/results/onnx-spinning.md (figures go there, never into docstrings).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import systems
from measure import run_measured
from report import write_results
from workloads import prepare

PLACEMENTS = ((1, 2), (2, 1))  # (workers, threads each) on 2 cores


@dataclass(frozen=True)
class Run:
    seconds: float  # end to end
    user: float  # the whole process tree's
    system: float


def one_run(
    spec: Path, env: dict[str, str], out: Path, spinning: bool, place: tuple[int, int]
) -> Run:
    systems._fresh(out)
    cmd = [
        systems.THRESHER,
        "run",
        str(spec),
        "--set",
        f"model.options.spinning={str(spinning).lower()}",
    ]
    cmd += ["--set", f"run.workers={place[0]}"]  # the cores shared among them
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    measured = run_measured(cmd, env, watch=out, pattern="part-*.parquet")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Run(measured.seconds, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200,000 rows, not 5,000,000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="thresher-spinning-"))
    root.mkdir(parents=True, exist_ok=True)
    workload = prepare("mlp", root, args.quick)
    env, spec, out = systems.side_job(workload, root, "spinning")
    started, load = time.time(), os.getloadavg()[0]
    runs: dict[tuple[tuple[int, int], bool], list[Run]] = {}
    for attempt in range(args.repeat):
        for place in PLACEMENTS:
            for spinning in (attempt % 2 == 0, attempt % 2 == 1):  # who goes first alternates
                run = one_run(spec, env, out, spinning, place)
                runs.setdefault((place, spinning), []).append(run)
                print(f"[{place[0]}x{place[1]}] spinning {spinning}: {run.seconds:.2f} s,"
                      f" user {run.user:.2f} s, system {run.system:.2f} s", flush=True)  # fmt: skip
    lines = [
        "# onnxruntime's intra-op threads: spinning or sleeping"
        + (" (--quick)" if args.quick else ""),
        "",
        f"`python benchmarks/onnx_spinning.py{' --quick' if args.quick else ''}"
        f" --repeat {args.repeat}`, run {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))};"
        f" load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.",
        "",
        f"`thresher run` of the MLP workload ({workload.title}, {workload.rows:,} rows), end to"
        " end, with `model.options.spinning` true and false taking turns. CPU: the whole"
        " process tree's, median of the runs. The 2 x 1 placement has no intra-op thread"
        " to spin: it is the control.",
        "",
        "| placement | spinning | best (s) | median (s) | user CPU (s) | system CPU (s) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for place in PLACEMENTS:
        for spinning in (True, False):
            found = runs[(place, spinning)]
            seconds = [r.seconds for r in found]
            lines.append(
                f"| {place[0]} worker(s) x {place[1]} thread(s) | {str(spinning).lower()} |"
                f" {min(seconds):.2f} | {statistics.median(seconds):.2f} |"
                f" {statistics.median(r.user for r in found):.2f} |"
                f" {statistics.median(r.system for r in found):.2f} |"
            )
    lines += ["", "All runs (s):"]
    for (place, spinning), found in runs.items():
        listed = ", ".join(f"{r.seconds:.2f}" for r in found)
        lines.append(f"- {place[0]} x {place[1]}, spinning {str(spinning).lower()}: {listed}")
    write_results("onnx-spinning", lines, args.quick)


if __name__ == "__main__":
    main()
