"""Daft doing the same job, run as its own process so it is measured like the rest.

    python benchmarks/daftjob.py WORKLOAD.json OUT_DIR --batch-size N [--model-batch M] \
        --workers 2 --threads 1

`daft.read_parquet` -> a `@daft.cls` class whose `__init__` loads the model once per
instance and whose `@daft.method.batch` predicts a batch -> `write_parquet`, on Daft's
native (local) runner, as Daft's docs set up batch inference on one machine. Set up as a
competent Daft user would on this machine (each choice also stated in results.md):

- `max_concurrency = workers` instances, each with its own copy of the model. `workers`
  and `threads` are thresher's placement for the job (2 x 1 on 2 cores; 1 x 2 for the
  1,000-row job, which has one batch's worth of rows): one intra-op thread per instance
  when there are as many instances as cores, so they do not fight over the cores.
- `use_process` left unset: Daft then picks threads or processes for the instances by
  measuring (its docs' default). `--use-process yes|no` forces one; on the busy 2-core
  machine this was written on, neither differed from the default beyond the noise.
- `batch_size`: thresher tuned's batch size for the matrix models (the size that model
  runs fastest at here). For MiniLM, batches of 1,024 rows that the instance encodes in
  batches of `--model-batch` 64, as for Ray Data (see raydata.py): encode sorts each
  call's texts by length first.
- The input is one Parquet file; Daft's native runner streams it in morsels and hands
  batches to whichever instance is free, so both instances have work (checked with
  `BENCH_BATCH_LOG`, see `workloads.log_batch`).

Daft's start-up (import, the runner, the instances' processes and model loads) is part of
its time.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from workloads import Workload, load_predictor, log_batch

USE_PROCESS = {"auto": None, "yes": True, "no": False}


def make_model_class(
    workload: Workload, workers: int, batch_size: int, model_batch: int, use_process: bool | None
) -> Any:
    """The `@daft.cls` predictor for `workload`: return type, concurrency, batch size."""
    import daft

    text = workload.output == "embedding"
    returns = daft.DataType.list(daft.DataType.float32()) if text else daft.DataType.int64()

    @daft.cls(max_concurrency=workers, use_process=use_process)
    class Predict:
        """One Daft instance: the model, loaded once in its own process."""

        def __init__(self, workload_json: str, threads: int) -> None:
            self.workload = Workload.from_json(workload_json)
            self.predict = load_predictor(self.workload, threads)

        @daft.method.batch(return_dtype=returns, batch_size=batch_size)
        def __call__(self, *columns: daft.Series) -> pa.Array:
            log_batch(len(columns[0]))
            if self.workload.output == "embedding":
                vectors = self.predict(columns[0].to_pylist(), model_batch)
                offsets = np.arange(0, vectors.size + 1, vectors.shape[1], dtype=np.int32)
                return pa.ListArray.from_arrays(offsets, np.ascontiguousarray(vectors).reshape(-1))
            matrix = np.column_stack([c.to_arrow().to_numpy() for c in columns])
            return pa.array(self.predict(matrix, model_batch))

    return Predict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--model-batch", type=int, help="the model's own batch (default: the same)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--use-process", choices=list(USE_PROCESS), default="auto")
    args = parser.parse_args()
    workload_json = args.workload.read_text()
    workload = Workload.from_json(workload_json)

    import daft

    use_process = USE_PROCESS[args.use_process]
    model_batch = args.model_batch or args.batch_size
    model_class = make_model_class(
        workload, args.workers, args.batch_size, model_batch, use_process
    )
    predict = model_class(workload_json, args.threads)
    df = daft.read_parquet(workload.data).select("id", *workload.features)
    df = df.select("id", predict(*(df[name] for name in workload.features)).alias(workload.output))
    df.write_parquet(str(args.out))


if __name__ == "__main__":
    main()
