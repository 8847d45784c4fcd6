"""Peak memory of `thresher run` as the input grows: it should stay roughly flat.

    python benchmarks/memory_scaling.py --rows 1000000 5000000 --model sklearn onnx
    python benchmarks/memory_scaling.py --rows 1000000 42000000 --model onnx  # 10 GB

For each size it writes a Parquet file of `rows` x 30 float features (plus an id), trains a
small model once, runs the real CLI under `/usr/bin/time -v`, and samples the summed RSS of
the whole process tree (coordinator + workers) every 50 ms. It checks the output against a
direct model call on the same rows, then prints a Markdown table: rows, peak RSS of the
largest process (what `time -v` reports), peak summed RSS of the tree, and their ratio to
the smallest input.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from measure import run_measured
from workloads import FEATURES, write_input

TRAIN_ROWS = 20_000


def train(directory: Path, kind: str) -> Path:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    x = rng.standard_normal((TRAIN_ROWS, len(FEATURES)))
    y = (x[:, 0] + 0.5 * x[:, 1] - x[:, 2] > 0).astype(np.int64)
    model = LogisticRegression(max_iter=200).fit(x, y)
    if kind == "sklearn":
        import skops.io as sio

        path = directory / "model.skops"
        sio.dump(model, path)
        return path
    from skl2onnx import to_onnx

    onx = to_onnx(model, x[:1].astype(np.float32), options={"zipmap": False})
    path = directory / "model.onnx"
    path.write_bytes(onx.SerializeToString())
    return path


# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child started by a
# large parent would report the parent's peak.
MODEL_ONLY = """
import sys
from thresher.models import LoadContext, load_model
from thresher.spec import ModelSection
load_model(ModelSection(kind=sys.argv[1], uri=sys.argv[2]), LoadContext(features=(), threads=1))
status = open("/proc/self/status").read().split("VmHWM:")[1]
print(int(status.split()[0]) * 1024)
"""


def model_only_rss(model_path: Path, kind: str, env: dict[str, str]) -> int:
    """Peak RSS of a process that only loads the model as a worker does (Python, the
    libraries it imports, the model itself): "the model" in the memory target."""
    out = subprocess.run(
        [sys.executable, "-c", MODEL_ONLY, kind, str(model_path)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip().splitlines()[-1])


def run_job(spec: Path, env: dict[str, str]) -> tuple[int, int, float]:
    """(max RSS of one process from time -v, peak summed tree RSS, seconds)."""
    thresher = Path(sys.executable).parent / "thresher"
    measured = run_measured([str(thresher), "run", str(spec)], env)
    return measured.max_rss, measured.peak_tree_rss, measured.seconds


def check_output(out_dir: Path, data: Path, model_path: Path, kind: str) -> None:
    """Every row: the output equals a direct model call on the same rows, in input order
    (compared row group by row group, so the check itself stays small in memory)."""
    got = pq.read_table(sorted(out_dir.glob("part-*.parquet")), columns=["id", "prediction"])
    ids = got.column("id").to_numpy()
    assert np.array_equal(ids, np.arange(len(ids))), "ids out of order or missing"
    predict = _direct(model_path, kind)
    source = pq.ParquetFile(data)
    assert len(ids) == source.metadata.num_rows, "rows missing"
    start = 0
    actual = got.column("prediction").to_numpy()
    for group in range(source.num_row_groups):
        table = source.read_row_group(group, columns=FEATURES)
        x = np.column_stack([table.column(f).to_numpy() for f in FEATURES])
        expected = np.asarray(predict(x)).reshape(-1)
        assert np.array_equal(actual[start : start + len(x)], expected), "predictions differ"
        start += len(x)


def _direct(model_path: Path, kind: str) -> Any:
    """The model called directly, as its own library would."""
    if kind == "sklearn":
        import skops.io as sio

        return sio.load(model_path).predict
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: session.run(None, {name: x.astype(np.float32)})[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--model", nargs="+", default=["sklearn", "onnx"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--batch-size", default="auto", help='batch.size: "auto" or rows')
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="thresher-mem-"))
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    rows_table = []
    size: int | str = int(args.batch_size) if args.batch_size.isdigit() else args.batch_size
    baselines = {}
    for kind in args.model:
        model_path = train(root, kind)
        baselines[kind] = model_only_rss(model_path, kind, env)
        for rows in args.rows:
            data = root / f"input-{rows}.parquet"
            if not data.exists():
                write_input(data, rows)
            out = root / f"out-{kind}-{rows}"
            spec = root / f"job-{kind}-{rows}.toml"
            spec.write_text(
                f'[source]\nuri = "{data}"\nid_column = "id"\n'
                f'[model]\nkind = "{kind}"\nuri = "{model_path}"\n'
                f"[batch]\nsize = {json.dumps(size)}\n[run]\nworkers = {args.workers}\n"
                f'[sink]\nuri = "{out}/"\nforce = true\n'
            )
            one, tree, seconds = run_job(spec, env)
            check_output(out, data, model_path, kind)
            rows_table.append((kind, rows, data.stat().st_size, one, tree, seconds))
    print(f"batch.size = {size}, {args.workers} workers. 'model': peak RSS of a process that")
    print("only loads the model (Python, its libraries, the model), once per worker.")
    print()
    print(
        "| model | rows | input | max RSS, one process (time -v) | peak RSS, whole tree"
        " | tree - workers x model | seconds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, rows, size_bytes, one, tree, seconds in rows_table:
        beyond = tree - args.workers * baselines[kind]
        mib = f"{one / 2**20:,.0f} MiB | {tree / 2**20:,.0f} MiB | {beyond / 2**20:,.0f} MiB"
        print(f"| {kind} | {rows:,} | {size_bytes / 1e9:.1f} GB | {mib} | {seconds:.1f} |")
    for kind, rss in baselines.items():
        print(f"{kind}: model alone {rss / 2**20:,.0f} MiB")
    for kind in args.model:
        runs = [r for r in rows_table if r[0] == kind]
        if len(runs) > 1:
            ratio = runs[-1][4] / runs[0][4]
            grow = runs[-1][1] / runs[0][1]
            print(f"{kind}: input x{grow:.0f} -> peak tree RSS x{ratio:.2f}")


if __name__ == "__main__":
    main()
