"""The python-kind workloads (numpy_mlp.py), thresher of two source trees beside the
hand-written baselines, taking turns: wall seconds and the process tree's CPU seconds.

    python benchmarks/small_jobs.py --before /tmp/old/src --after src [--quick] [--pairs 3]

For each of python-overhead (1,000 rows, defaults ÷ the bare process), python-files
(8 files, tuned size ÷ the hand loop's whole process) and python-mlp (tuned size ÷ the
optimum's stage sum), each round runs the baseline, then thresher from `--before`, then
from `--after` (PYTHONPATH puts each tree first). Every tree gets two unmeasured runs
first, on a store of its own, so placement's threads-or-processes trial (plan/history.py)
is behind it. CPU time (`RUSAGE_CHILDREN`) is less at the mercy of a shared machine
than wall time. Writes results/small-jobs.md (small-jobs-quick.md with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
from pathlib import Path

import systems
from measure import run_measured
from report import write_results
from workloads import PYTHON_WORKLOADS, Workload, prepare

TUNED = {"python-mlp": 65536, "python-files": 65536}  # `thresher tune`'s pick here


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds of the whole process tree, and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    measured = run_measured(cmd, env, sample=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return measured.seconds, cpu, measured.stdout


def thresher(workload: Workload, root: Path, src: str, tag: str) -> tuple[float, float]:
    env = {**systems.environment(root), "THRESHER_STORE": f"sqlite:///{root / f'{tag}.db'}"}
    env["PYTHONPATH"] = f"{src}{os.pathsep}{env['PYTHONPATH']}"
    out = root / f"out-{workload.name}-{tag}"
    systems._fresh(out)
    spec = systems.write_spec(workload, root / f"{workload.name}-{tag}.toml", out)
    size = TUNED.get(workload.name)
    cmd = [systems.THRESHER, "run", str(spec)]
    cmd += ["--set", f"batch.size={size}"] if size else []
    seconds, cpu, _ = timed(cmd, env)
    return seconds, cpu


def baseline(workload: Workload, root: Path) -> tuple[float, float]:
    """The bare process or the hand loop (start to exit), or the optimum's stage sum."""
    env = {**systems.environment(root), "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
    out = root / f"out-{workload.name}-hand"
    systems._fresh(out)
    out.mkdir()
    path = root / f"{workload.name}.json"
    path.write_text(workload.to_json())
    cmd = [systems.PYTHON, str(systems.HERE / "handwritten.py"), "optimum", str(path), str(out)]
    seconds, cpu, stdout = timed([*cmd, "--threads", str(systems.CORES)], env)
    if workload.whole_process:
        return seconds, cpu
    stages = json.loads(stdout.strip().splitlines()[-1])
    return stages["read"] + stages["model"] + stages["write"], cpu


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="thresher-small-"))
    root.mkdir(parents=True, exist_ok=True)
    lines = [
        f"`python benchmarks/small_jobs.py --pairs {args.pairs}{' --quick' if args.quick else ''}`,"
        f" load average {os.getloadavg()[0]:.1f} at the start on {systems.CORES} cores;"
        " medians of the pairs. Baseline: python-mlp the optimum's stage sum (its CPU: the"
        " whole process, sweep included), the others the hand-written process, start to exit.",
        "",
        "| workload | rows | baseline s (CPU) | before s (CPU) | after s (CPU) |"
        " before ÷ baseline, wall (CPU) | after ÷ baseline, wall (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in PYTHON_WORKLOADS:
        workload = prepare(name, root, args.quick)
        for tag, src in (("before", args.before), ("after", args.after)):
            for _ in range(2):
                thresher(workload, root, src, tag)
        runs: dict[str, list[tuple[float, float]]] = {"hand": [], "before": [], "after": []}
        for _ in range(args.pairs):
            runs["hand"].append(baseline(workload, root))
            runs["before"].append(thresher(workload, root, args.before, "before"))
            runs["after"].append(thresher(workload, root, args.after, "after"))
        med = {k: _medians(v) for k, v in runs.items()}
        hand, old, new = med["hand"], med["before"], med["after"]
        lines.append(
            f"| {name} | {workload.rows:,} | {hand[0]:.2f} ({hand[1]:.2f}) | {old[0]:.2f}"
            f" ({old[1]:.2f}) | {new[0]:.2f} ({new[1]:.2f}) | {old[0] / hand[0]:.2f}"
            f" ({old[1] / hand[1]:.2f}) | {new[0] / hand[0]:.2f} ({new[1] / hand[1]:.2f}) |"
        )
        print(lines[-1], flush=True)
    write_results("small-jobs", lines, args.quick)


if __name__ == "__main__":
    main()
