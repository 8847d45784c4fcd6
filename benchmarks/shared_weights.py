"""One copy of the model per machine: the whole tree's PSS with 2 workers against 1.

    python benchmarks/shared_weights.py                 # MiniLM and a 512 MiB torch model
    python benchmarks/shared_weights.py --only minilm --repeat 2

For each model, `thresher run` (the real CLI) runs the same job of 4 shards with
`run.workers` 1 and 2, under `run.start_method` "auto" (CPU workers forked from one
process that loaded the model: executors/zygote.py) and "spawn" (every worker loads its
own). Each run's peak PSS is summed over the whole process tree (coordinator, zygote,
workers), sampled from /proc/*/smaps_rollup every 50 ms: PSS divides each shared page
among the processes that map it, so shared weights count once. The target: PSS with 2
workers at most 1.25x one worker's. Wall times are reported too, as forked ÷ spawned.
Outputs are checked equal across the four runs of a model.

The large model is an MLP of two 8192x8192 layers (2 x 256 MiB float32) in a
`.safetensors` file, built here with fixed seeds; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from measure import run_measured
from workloads import minilm_folder, write_sentences

SHARDS = 4
TARGET = 1.25
MIB = 2**20

BIG_NET = """
import torch
from torch import nn


class BigNet(nn.Module):
    def __init__(self, features=30, width=8192):
        super().__init__()
        self.inp = nn.Linear(features, width)
        self.hidden = nn.Linear(width, width)
        self.out = nn.Linear(width, width)
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        x = torch.relu(self.hidden(x))
        x = torch.relu(self.out(x))
        return self.head(x)
"""


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    data: Path
    model: str  # the [model] section's TOML lines
    source: str  # the [source] section's extra lines


def minilm_case(root: Path, rows: int) -> Case:
    data = root / f"text-{rows}.parquet"
    if not data.exists():
        write_sentences(data, rows)
        table = pq.read_table(data)  # one row group per shard
        pq.write_table(table, data, row_group_size=-(-rows // SHARDS))
    return Case(
        "minilm",
        "all-MiniLM-L6-v2 (90 MiB of weights)",
        data,
        f'kind = "sentence-transformers"\nuri = {json.dumps(str(minilm_folder()))}\n',
        'columns = ["text"]\n',
    )


def big_case(root: Path, rows: int) -> Case:
    import torch
    from safetensors.torch import save_file

    (root / "bignet.py").write_text(BIG_NET)
    weights = root / "bignet.safetensors"
    if not weights.exists():
        sys.path.insert(0, str(root))
        from bignet import BigNet  # type: ignore[import-not-found]

        torch.manual_seed(0)
        save_file(BigNet().state_dict(), str(weights))
    data = root / f"matrix-{rows}.parquet"
    if not data.exists():
        rng = np.random.default_rng(0)
        columns = {"id": np.arange(rows)} | {f"f{i}": rng.standard_normal(rows) for i in range(30)}
        pq.write_table(pa.table(columns), data, row_group_size=-(-rows // SHARDS))
    features = [f"f{i}" for i in range(30)]
    size = weights.stat().st_size // MIB
    return Case(
        "big",
        f"a {size} MiB torch MLP (safetensors)",
        data,
        f'kind = "torch"\nuri = {json.dumps(str(root / "bignet.py") + ":BigNet")}\n'
        f'options = {{ weights = {json.dumps(str(weights))}, device = "cpu" }}\n',
        f"columns = {json.dumps(features)}\n",
    )


def run_case(
    case: Case, root: Path, workers: int, method: str, batch: str
) -> tuple[float, int, pa.Table]:
    """(seconds, peak tree PSS in bytes, output table) of one run."""
    out = root / f"out-{case.name}-{workers}-{method}"
    spec = root / f"{case.name}-{workers}-{method}.toml"
    size = batch if batch.isdigit() else json.dumps(batch)
    spec.write_text(
        f'[source]\nuri = {json.dumps(str(case.data))}\nid_column = "id"\nshard_bytes = 1024\n'
        f"{case.source}[model]\n{case.model}"
        f"[batch]\nsize = {size}\n"
        f'[run]\nworkers = {workers}\nstart_method = "{method}"\n'
        f"[sink]\nuri = {json.dumps(str(out) + '/')}\nforce = true\n"
    )
    env = {**os.environ, "THRESHER_STORE": f"sqlite:///{root / 'store.db'}"}
    thresher = Path(sys.executable).parent / "thresher"
    measured = run_measured([str(thresher), "run", str(spec)], env, pss=True)
    assert measured.peak_tree_pss is not None
    output = pq.read_table(sorted(out.glob("part-*.parquet")))
    return measured.seconds, measured.peak_tree_pss, output


def same_output(a: pa.Table, b: pa.Table) -> bool:
    if a.column("id").to_pylist() != b.column("id").to_pylist():
        return False
    name = next(c for c in a.column_names if c != "id")
    left, right = (np.asarray(t.column(name).to_pylist(), dtype=np.float64) for t in (a, b))
    return bool(np.allclose(left, right, rtol=1e-4, atol=1e-5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=["minilm", "big"], default=["minilm", "big"])
    parser.add_argument("--rows", type=int, default=4000, help="MiniLM texts")
    parser.add_argument("--big-rows", type=int, default=2000, help="rows for the large model")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each setting (best kept)")
    parser.add_argument("--batch", default="auto", help='batch.size: "auto" or rows')
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="thresher-shared-"))
    root.mkdir(parents=True, exist_ok=True)
    makers = {
        "minilm": lambda: minilm_case(root, args.rows),
        "big": lambda: big_case(root, args.big_rows),
    }
    lines = [
        f"batch.size = {args.batch}",
        "",
        "| model | start | PSS, 1 worker | PSS, 2 workers | 2 ÷ 1 | target | seconds, 2 workers |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in args.only:
        case = makers[name]()
        outputs: list[pa.Table] = []
        seconds: dict[str, float] = {}
        for method in ("auto", "spawn"):
            pss = {}
            for workers in (1, 2):
                best = None
                for _ in range(args.repeat):
                    took, peak, output = run_case(case, root, workers, method, args.batch)
                    outputs.append(output)
                    best = (
                        (took, peak) if best is None else (min(best[0], took), min(best[1], peak))
                    )
                assert best is not None
                pss[workers] = best[1]
                if workers == 2:
                    seconds[method] = best[0]
            ratio = pss[2] / pss[1]
            verdict = "met" if ratio <= TARGET else "missed"
            label = "forked (auto)" if method == "auto" else "spawned"
            lines.append(
                f"| {case.title} | {label} | {pss[1] / MIB:,.0f} MiB | {pss[2] / MIB:,.0f} MiB"
                f" | {ratio:.2f} | ≤ {TARGET} {verdict} | {seconds[method]:.1f} |"
            )
            print(lines[-1], flush=True)
        assert all(same_output(outputs[0], o) for o in outputs[1:]), f"{name}: outputs differ"
        lines.append(
            f"| {case.title} | forked ÷ spawned wall, 2 workers | | | "
            f"{seconds['auto'] / seconds['spawn']:.2f} | | |"
        )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
