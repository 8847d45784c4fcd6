"""Which Arrow memory pool thresher's processes should use: the tabular (LightGBM) and
MLP (ONNX) workloads' `thresher run`, 2 workers, with ARROW_DEFAULT_MEMORY_POOL set to
jemalloc (what the `thresher` command picks: thresher/allocator.py), mimalloc (pyarrow's
own default) and system (glibc's malloc), taking turns; best and median of N end to end,
the process tree's user and system CPU time, the largest process's peak RSS.

    python benchmarks/allocator.py [--quick] [--repeat 5] [--dir DIR]

Writes benchmarks/results/allocator.md (figures go there, never into docstrings).
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

WORKLOADS = ("tabular", "mlp")
POOLS = ("jemalloc", "mimalloc", "system")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200,000 rows, not 5,000,000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="thresher-allocator-"))
    root.mkdir(parents=True, exist_ok=True)
    started, load = time.time(), os.getloadavg()[0]
    tables, listed, titles = [], [], []
    for name in WORKLOADS:
        workload = prepare(name, root, args.quick)
        env, spec, out = systems.side_job(workload, root, "allocator")
        # 2 workers pinned: with them unset, the store's measurements of earlier jobs pick
        # threads or processes, and the variants would not run alike.
        variants = [
            Variant(pool, ("run.workers=2",), {"ARROW_DEFAULT_MEMORY_POOL": pool}) for pool in POOLS
        ]
        runs = take_turns(spec, env, out, variants, args.repeat)
        tables += table_rows(f"{name}, ", runs)
        listed += all_runs(f"{name}, ", runs)
        titles.append(f"{name}: {workload.title}, {workload.rows:,} rows")
    quick = " --quick" if args.quick else ""
    lines = [
        "# Arrow's memory pool in thresher's processes" + (" (--quick)" if quick else ""),
        "",
        f"`python benchmarks/allocator.py{quick} --repeat {args.repeat}`, run"
        f" {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}; load average (1 min)"
        f" {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.",
        "",
        "`thresher run`, 2 workers, end to end, with ARROW_DEFAULT_MEMORY_POOL naming each"
        " pool in turn (" + "; ".join(titles) + "). CPU: the whole process tree's; RSS: the"
        " largest process's; medians of the runs.",
        "",
        *TABLE_HEAD,
        *tables,
        "",
        "All runs (s):",
        *listed,
    ]
    write_results("allocator", lines, args.quick)


if __name__ == "__main__":
    main()
