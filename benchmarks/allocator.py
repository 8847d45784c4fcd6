"""Which Arrow memory pool thresher's processes should use: the tabular (LightGBM) and
MLP (ONNX) workloads' `thresher run`, 2 workers, with ARROW_DEFAULT_MEMORY_POOL set to
jemalloc (what the `thresher` command picks: thresher/cli/allocator.py), mimalloc (pyarrow's
own default) and system (glibc's malloc), taking turns; best and median of N end to end,
the process tree's user and system CPU time, the largest process's peak RSS.

    python benchmarks/allocator.py [--quick] [--repeat 5] [--dir DIR]

Writes benchmarks/results/allocator.md (figures go there, never into docstrings).
"""

from __future__ import annotations

import systems
from ab import SideRun, Variant, ab_report, all_runs, table_rows, take_turns
from report import write_results
from workloads import prepare

WORKLOADS = ("tabular", "mlp")
POOLS = ("jemalloc", "mimalloc", "system")


def main() -> None:
    side = SideRun.parse(__doc__, "allocator")
    tables, listed, titles = [], [], []
    for name in WORKLOADS:
        workload = prepare(name, side.root, side.args.quick)
        env, spec, out = systems.side_job(workload, side.root, "allocator")
        # 2 workers pinned: with them unset, the store's measurements of earlier jobs pick
        # threads or processes, and the variants would not run alike.
        variants = [
            Variant(pool, ("run.workers=2",), {"ARROW_DEFAULT_MEMORY_POOL": pool}) for pool in POOLS
        ]
        runs = take_turns(spec, env, out, variants, side.args.repeat)
        tables += table_rows(f"{name}, ", runs)
        listed += all_runs(f"{name}, ", runs)
        titles.append(f"{name}: {workload.title}, {workload.rows:,} rows")
    what = (
        "`thresher run`, 2 workers, end to end, with ARROW_DEFAULT_MEMORY_POOL naming each"
        " pool in turn (" + "; ".join(titles) + "). CPU: the whole process tree's; RSS: the"
        " largest process's; medians of the runs."
    )
    heading = ("Arrow's memory pool in thresher's processes", "allocator.py")
    write_results("allocator", ab_report(side, heading, what, tables, listed), side.args.quick)


if __name__ == "__main__":
    main()
