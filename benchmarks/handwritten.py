"""The hand-written baselines, each run as its own process so it is measured like the rest.

    python benchmarks/handwritten.py optimum WORKLOAD.json OUT_DIR --batch-size N --threads 2
    python benchmarks/handwritten.py naive WORKLOAD.json OUT_DIR --threads 2

`optimum` is the best a person could write by hand for one machine: pyarrow reads the input,
the model runs on the in-memory arrays at its best batch size with all cores, pyarrow
writes `id` + predictions to one Parquet file. A matrix model's input is read a row group
at a time into one matrix kept from group to group: a fresh matrix of the whole input
(1.2 GB for 5M rows x 30 doubles) spent 11-15 s on this VM in page faults alone, the
first touch of each page, which no careful hand would pay. Each stage is timed on its
own, summed over the row groups (model loading and the batch-size sweep are left out),
and printed as one JSON line.

An input that is a folder of Parquet files (the `python-files` workload) gets the loop a
person writes by hand instead, in one process: each file read whole, predicted whole, its
predictions written to a file of their own; no batch-size sweep (its figure is the whole
process, start to exit).

`naive` predicts one row at a time in a Python loop over the first `naive_rows` rows and
writes them, so they can be checked; the caller extrapolates its time to the full input.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
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
    if Path(workload.data).is_dir():
        return file_loop(workload, out)
    trees = workload.kind == "lightgbm"
    predict = load_predictor(workload, threads, compiled=trees)
    library = load_predictor(workload, threads) if trees else None
    source = pq.ParquetFile(workload.data)
    columns = ["id", *workload.features]
    # Lazy imports (pyarrow's to_numpy pulls in pandas) are start-up, not reading.
    read_inputs(workload, next(source.iter_batches(1, columns=columns)))
    clock = {"read": 0.0, "model": 0.0, "model_library": 0.0}
    ids, parts, size = [], [], 0
    for table, inputs in _pieces(workload, source, columns, trees, clock):
        if not size:  # the sweep, on the first piece: not timed
            size = best_size(predict, inputs, workload, batch_size)
        started = time.perf_counter()
        parts.append(predict(inputs, size))
        clock["model"] += time.perf_counter() - started
        ids.extend(table.column("id").chunks)
        if library is not None:
            library(inputs[:16], 16)
            started = time.perf_counter()
            if not np.array_equal(library(inputs, size), parts[-1]):
                raise SystemExit("compiled trees and the library predict differently")
            clock["model_library"] += time.perf_counter() - started
    predictions = np.concatenate(parts)
    started = time.perf_counter()
    table = output_table(pa.chunked_array(ids), predictions, workload.output)
    pq.write_table(table, out / "part-00000.parquet")
    t_write = time.perf_counter() - started
    stages: dict[str, Any] = {"model_library": clock["model_library"]} if trees else {}
    return stages | {
        "read": clock["read"],
        "model": clock["model"],
        "write": t_write,
        "batch_size": size,
    }


def file_loop(workload: Workload, out: Path) -> dict[str, Any]:
    """The hand loop over a folder's files: read, predict, write one file at a time."""
    predict = load_predictor(workload, threads=0)
    columns = ["id", *workload.features]
    clock = {"read": 0.0, "model": 0.0, "write": 0.0}
    for i, path in enumerate(sorted(Path(workload.data).glob("*.parquet"))):
        started = time.perf_counter()
        table = pq.read_table(path, columns=columns)
        inputs = read_inputs(workload, table)
        clock["read"] += time.perf_counter() - started
        started = time.perf_counter()
        predictions = predict(inputs, len(inputs))
        clock["model"] += time.perf_counter() - started
        started = time.perf_counter()
        result = output_table(table.column("id"), predictions, workload.output)
        pq.write_table(result, out / f"part-{i:05d}.parquet")
        clock["write"] += time.perf_counter() - started
    return {**clock, "batch_size": "a file"}


def _pieces(
    workload: Workload,
    source: pq.ParquetFile,
    columns: list[str],
    trees: bool,
    clock: dict[str, float],
) -> Iterator[tuple[pa.Table, Any]]:
    """The input as (table, model inputs) pieces, the seconds to read and convert them
    added to `clock["read"]`: texts whole (small; the encoder sorts them all by length),
    a matrix a row group at a time into one buffer kept from group to group (each piece
    is a view of it, good until the next). Compiled trees read a matrix fastest by
    column, as thresher reads Arrow's columns; the rest take rows."""
    started = time.perf_counter()
    if workload.output == "embedding":
        table = source.read(columns=columns)
        inputs = read_inputs(workload, table)
        clock["read"] += time.perf_counter() - started
        yield table, inputs
        return
    if workload.kind == "python":  # a dict of the row group's columns, as thresher hands it
        for group in range(source.num_row_groups):
            started = time.perf_counter()
            table = source.read_row_group(group, columns=columns)
            inputs = read_inputs(workload, table)
            clock["read"] += time.perf_counter() - started
            yield table, inputs
        return
    most = max(source.metadata.row_group(g).num_rows for g in range(source.num_row_groups))
    buffer = np.empty((most, len(workload.features)), order="F" if trees else "C")
    buffer.fill(0.0)  # touched now: its pages' first faults are set-up, as loading is
    for group in range(source.num_row_groups):
        started = time.perf_counter()
        table = source.read_row_group(group, columns=columns)
        inputs = read_inputs(workload, table, by_column=trees, out=buffer[: table.num_rows])
        clock["read"] += time.perf_counter() - started
        yield table, inputs


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
