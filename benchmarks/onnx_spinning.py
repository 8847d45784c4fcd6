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
import tempfile
import time
from pathlib import Path

import systems
from ab import TABLE_HEAD, Variant, all_runs, table_rows, take_turns
from report import write_results
from workloads import prepare

PLACEMENTS = (1, 2)  # workers, sharing 2 cores: 1 x 2 threads, 2 x 1 thread


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
    tables, listed = [], []
    for workers in PLACEMENTS:
        variants = [
            Variant(
                f"spinning {flag}", (f"model.options.spinning={flag}", f"run.workers={workers}")
            )
            for flag in ("true", "false")
        ]
        runs = take_turns(spec, env, out, variants, args.repeat)
        tables += table_rows(f"{workers} worker(s), ", runs)
        listed += all_runs(f"{workers} worker(s), ", runs)
    quick = " --quick" if args.quick else ""
    lines = [
        "# onnxruntime's intra-op threads: spinning or sleeping"
        + quick.replace(" --", " (--")
        + (")" if quick else ""),
        "",
        f"`python benchmarks/onnx_spinning.py{quick} --repeat {args.repeat}`, run"
        f" {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}; load average (1 min)"
        f" {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.",
        "",
        f"`thresher run` of the MLP workload ({workload.title}, {workload.rows:,} rows), end to"
        " end, with `model.options.spinning` true and false taking turns, on 2 cores: 1"
        " worker of 2 threads, and 2 workers of 1 thread, which have no intra-op thread to"
        " spin (the control). CPU: the whole process tree's, median of the runs.",
        "",
        *TABLE_HEAD,
        *tables,
        "",
        "All runs (s):",
        *listed,
    ]
    write_results("onnx-spinning", lines, args.quick)


if __name__ == "__main__":
    main()
