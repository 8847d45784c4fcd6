"""The hand-written baselines, each run as its own process so it is measured like the rest.

    python benchmarks/handwritten.py optimum WORKLOAD.json OUT_DIR --batch-size N --threads 2
    python benchmarks/handwritten.py naive WORKLOAD.json OUT_DIR --threads 2

`optimum` is the best a person could write by hand for one machine: pyarrow reads the whole
input into memory, the model runs on the in-memory arrays at its best batch size with all
cores, pyarrow writes `id` + predictions to one Parquet file. Each stage is timed on its
own (model loading and the batch-size sweep are left out) and printed as one JSON line.

`naive` predicts one row at a time in a Python loop over the first `naive_rows` rows and
writes them, so they can be checked; the caller extrapolates its time to the full input.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from workloads import Predictor, Workload, load_predictor, output_table, read_inputs

SWEEP_ROWS = 65_536
MATRIX_SIZES = (1_024, 4_096, 16_384, 65_536)
TEXT_SWEEP_ROWS = 256


def best_size(predict: Predictor, inputs: Any, workload: Workload, hint: int) -> int:
    """The batch size with the highest throughput, swept on the first rows: for a matrix
    model `MATRIX_SIZES` and one whole-sample call (whole array if it wins); for a text
    model the sizes `thresher tune` tried, each over the same few hundred texts (the
    encoder sorts them by length, as a hand-written job would). `hint` is always tried."""
    predict(inputs[:16], 16)  # warm-up: lazy initialisation is not throughput
    text = workload.output == "embedding"
    sample = inputs[: TEXT_SWEEP_ROWS if text else SWEEP_ROWS]
    sizes = {hint, *workload.tune_sizes} if text else {hint, *MATRIX_SIZES, len(sample)}
    rates = {}
    for size in sorted(s for s in sizes if s <= len(sample)) or [len(sample)]:
        clock = time.perf_counter()
        predict(sample, size)
        rates[size] = len(sample) / (time.perf_counter() - clock)
    best = max(rates, key=lambda size: rates[size])
    return len(inputs) if best == len(sample) and not text else best


def optimum(workload: Workload, out: Path, batch_size: int, threads: int) -> dict[str, Any]:
    """Seconds per stage (read, model, write) and the batch size the sweep chose. A tree
    model runs compiled to native code (its fastest form, as thresher runs it);
    `model_library` is the same stage with the library's own predict, for the record."""
    trees = workload.kind == "lightgbm"
    predict = load_predictor(workload, threads, compiled=trees)
    columns = ["id", *workload.features]
    # Lazy imports (pyarrow's to_numpy pulls in pandas) are start-up, not reading.
    read_inputs(workload, next(pq.ParquetFile(workload.data).iter_batches(1, columns=columns)))
    clock = time.perf_counter()
    table = pq.ParquetFile(workload.data).read(columns=columns)
    # Compiled trees read a matrix fastest by column, as thresher reads Arrow's columns.
    inputs, ids = read_inputs(workload, table, by_column=trees), table.column("id")
    t_read = time.perf_counter() - clock
    size = best_size(predict, inputs, workload, batch_size)
    clock = time.perf_counter()
    predictions = predict(inputs, size)
    t_model = time.perf_counter() - clock
    stages: dict[str, Any] = {}
    if trees:
        library = load_predictor(workload, threads)
        library(inputs[:16], 16)
        clock = time.perf_counter()
        same = library(inputs, size)
        stages["model_library"] = time.perf_counter() - clock
        if not np.array_equal(same, predictions):
            raise SystemExit("compiled trees and the library predict differently")
    clock = time.perf_counter()
    pq.write_table(output_table(ids, predictions, workload.output), out / "part-00000.parquet")
    t_write = time.perf_counter() - clock
    return stages | {"read": t_read, "model": t_model, "write": t_write, "batch_size": size}


def naive(workload: Workload, out: Path, threads: int) -> dict[str, Any]:
    """Seconds the per-row loop took, and over how many rows."""
    predict = load_predictor(workload, threads)
    columns = ["id", *workload.features]
    batches = pq.ParquetFile(workload.data).iter_batches(workload.naive_rows, columns=columns)
    table = next(batches)
    inputs = read_inputs(workload, table)
    predict(inputs[:1], 1)  # warm-up, as for every other system
    clock = time.perf_counter()
    rows = [predict(inputs[i : i + 1], 1) for i in range(len(inputs))]
    loop = time.perf_counter() - clock
    predictions = np.concatenate(rows)
    pq.write_table(
        output_table(table.column("id"), predictions, workload.output), out / "part.parquet"
    )
    return {"loop": loop, "rows": len(inputs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", choices=["optimum", "naive"])
    parser.add_argument("workload", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    workload = Workload.from_json(args.workload.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    if args.baseline == "optimum":
        stages = optimum(workload, args.out, args.batch_size, args.threads)
    else:
        stages = naive(workload, args.out, args.threads)
    print(json.dumps(stages))


if __name__ == "__main__":
    main()
