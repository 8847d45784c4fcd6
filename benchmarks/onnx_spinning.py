"""Whether onnxruntime's intra-op threads should spin between batches: the MLP workload's
`thresher run` with `model.options.spinning` true and false, taking turns, in the
placements a job of it gets — one worker of 2 threads (what `auto` picks for it on 2
cores) and 2 workers of 1 thread (no intra-op thread to spin: the control) — best and
median of N end to end, and the process tree's user and system CPU time.

    python benchmarks/onnx_spinning.py [--quick] [--repeat 5] [--dir DIR]

Writes benchmarks/results/onnx-spinning.md (figures go there, never into docstrings).
"""

from __future__ import annotations

import systems
from ab import SideRun, Variant, ab_report, all_runs, table_rows, take_turns
from report import write_results
from workloads import prepare

PLACEMENTS = (1, 2)  # workers, sharing 2 cores: 1 x 2 threads, 2 x 1 thread


def main() -> None:
    side = SideRun.parse(__doc__, "spinning")
    workload = prepare("mlp", side.root, side.args.quick)
    env, spec, out = systems.side_job(workload, side.root, "spinning")
    tables, listed = [], []
    for workers in PLACEMENTS:
        variants = [
            Variant(
                f"spinning {flag}", (f"model.options.spinning={flag}", f"run.workers={workers}")
            )
            for flag in ("true", "false")
        ]
        runs = take_turns(spec, env, out, variants, side.args.repeat)
        tables += table_rows(f"{workers} worker(s), ", runs)
        listed += all_runs(f"{workers} worker(s), ", runs)
    what = (
        f"`thresher run` of the MLP workload ({workload.title}, {workload.rows:,} rows), end to"
        " end, with `model.options.spinning` true and false taking turns, on 2 cores: 1"
        " worker of 2 threads, and 2 workers of 1 thread, which have no intra-op thread to"
        " spin (the control). CPU: the whole process tree's, median of the runs."
    )
    heading = ("onnxruntime's intra-op threads: spinning or sleeping", "onnx_spinning.py")
    write_results("onnx-spinning", ab_report(side, heading, what, tables, listed), side.args.quick)


if __name__ == "__main__":
    main()
