"""Spark doing the same job, run as its own process so it is measured like the rest.

    python benchmarks/sparkjob.py WORKLOAD.json OUT_DIR --batch-size N [--model-batch M] --cores 2

`spark.read.parquet` -> `pyspark.ml.functions.predict_batch_udf`, whose `make_predict_fn`
loads the model; Spark calls it once per Python worker and caches the predict function
there (Python workers are reused across tasks, `spark.python.worker.reuse`, on by default)
-> `write.parquet`. Set up as a competent Spark user would on this machine (each choice
also stated in results.md):

- `local[cores]`: one task slot per core, so two Python workers each run one partition at
  a time. Intra-op threads per worker: cores / the partitions that run at once (1 on 2
  cores with two or more partitions, so the workers do not fight over the cores; 2 for the
  1,000-row job, whose one partition runs alone).
- Partitions: Spark splits the Parquet file at row groups into `maxPartitionBytes` (128 MB)
  pieces, at least one per core, which gives every slot work for the matrix inputs. The
  text input is a few MB in one or two row groups, so it is repartitioned round-robin into
  `TEXT_PARTITIONS_PER_CORE` partitions per core: every worker has work, and one long
  partition does not finish alone.
- `batch_size`: thresher tuned's batch size for the matrix models (the size that model runs
  fastest at here). For MiniLM, batches of 1,024 rows that the worker encodes in batches of
  `--model-batch` 64, as for Ray Data (see raydata.py): encode sorts each call's texts by
  length first. The 30 feature
  columns go in as one `struct`, which `predict_batch_udf` turns into the float matrix in
  one `DataFrame.to_numpy()`; the docs' `array(...)` + `input_tensor_shapes` stacks the
  rows one by one in Python, and 30 separate inputs need a predict function of 30
  parameters.
- The web UI is off and the log level ERROR: nothing of the job needs them.

Spark's start-up (the JVM, the session, the Python workers and model loads) is part of its
time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from workloads import Workload, load_predictor, log_batch

TEXT_PARTITIONS_PER_CORE = 4


def make_predict_fn(
    workload_json: str, threads: int, model_batch: int | None
) -> Callable[[], Callable[..., np.ndarray]]:
    """`predict_batch_udf`'s model loader: run in each Python worker, once."""

    def make() -> Callable[..., np.ndarray]:
        workload = Workload.from_json(workload_json)
        predict = load_predictor(workload, threads)

        def predict_batch(inputs: np.ndarray) -> np.ndarray:
            log_batch(len(inputs))
            if workload.output == "embedding":
                return predict(list(inputs), model_batch or len(inputs))
            return predict(inputs, model_batch or len(inputs))

        return predict_batch

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--model-batch", type=int, help="the model's own batch (default: the same)")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    workload_json = args.workload.read_text()
    workload = Workload.from_json(workload_json)
    text = workload.output == "embedding"

    # The Python workers run this interpreter (the venv's), with our modules on the path.
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import struct
    from pyspark.sql.types import ArrayType, FloatType, LongType

    scratch = tempfile.mkdtemp(prefix="spark-bench-", dir="/tmp")
    spark = (
        SparkSession.builder.master(f"local[{args.cores}]")
        .appName("thresher-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", scratch)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.parquet(workload.data)
    if text:
        df = df.repartition(args.cores * TEXT_PARTITIONS_PER_CORE)
    partitions = df.rdd.getNumPartitions()
    threads = max(1, args.cores // min(args.cores, partitions))
    print(f"{partitions} partitions, {threads} thread(s) per worker")
    predict = predict_batch_udf(
        make_predict_fn(workload_json, threads, args.model_batch),
        return_type=ArrayType(FloatType()) if text else LongType(),
        batch_size=args.batch_size,
    )
    inputs = workload.features[0] if text else struct(*workload.features)
    out = df.select("id", predict(inputs).alias(workload.output))
    out.write.mode("overwrite").parquet(str(args.out))
    spark.stop()
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
