"""Ray Data doing the same job, run as its own process so it is measured like the rest.

    python benchmarks/raydata.py WORKLOAD.json OUT_DIR --batch-size N [--model-batch M] \
        --workers 2 --threads 1

`ray.data.read_parquet` -> `map_batches` with an actor class that loads the model once in
`__init__` -> `write_parquet`. Set up as a competent Ray Data user would on this machine
(each choice also stated in results.md):

- An actor pool of thresher's placement for the job (2 actors of 1 thread on 2 cores: one
  intra-op thread per actor, so they do not fight over the cores; 1 actor of 2 threads
  for the 1,000-row job).
- Each actor asks for half a CPU: on a small machine whole-CPU actors leave none for the
  read and write tasks, and Ray waits forever.
- `batch_size`: thresher tuned's batch size for the matrix models (the size that model runs
  fastest at here). For MiniLM, `map_batches` hands each actor 1,024 rows (Ray Data's
  default batch) and the actor encodes them in batches of `--model-batch` 64:
  `SentenceTransformer.encode` sorts each call's texts by length first, so batches of 64
  taken from 1,024 sorted rows pad little (handed 64 rows at a time, encode had nothing to
  sort, and every batch padded to its longest row in input order).
- The text input (a few MB) is repartitioned into `TEXT_BLOCKS_PER_ACTOR` blocks per
  actor: left to itself Ray reads it as one block, which goes whole to one actor while
  the other idles (`override_num_blocks` on the read did not help: the one read task's
  blocks still went to one actor). The matrix inputs are large enough for Ray's own block
  sizing to feed every actor.

Ray's start-up (`ray.init`) is part of its time, unless `--address` names a running
cluster to join. Ray keeps its temp dir under /tmp (a
per-run folder, removed when the run succeeds).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
from workloads import Workload, load_predictor, log_batch, output_table, read_inputs

ACTOR_CPUS = 0.5
TEXT_BLOCKS_PER_ACTOR = 8


class Predict:
    """One Ray actor: the model, loaded once."""

    def __init__(self, workload_json: str, threads: int, model_batch: int) -> None:
        self.workload = Workload.from_json(workload_json)
        self.predict = load_predictor(self.workload, threads)
        self.model_batch = model_batch

    def __call__(self, batch: pa.Table) -> pa.Table:
        log_batch(batch.num_rows)
        predictions = self.predict(read_inputs(self.workload, batch), self.model_batch)
        return output_table(batch.column("id"), predictions, self.workload.output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--model-batch", type=int, help="the model's own batch (default: the same)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--address", help="join this running cluster instead of starting one")
    args = parser.parse_args()
    workload_json = args.workload.read_text()
    workload = Workload.from_json(workload_json)

    import ray

    temp = tempfile.mkdtemp(prefix="ray-bench-", dir="/tmp")
    if args.address:  # a cluster that is already up (serve_on_ray.py: the server's)
        ray.init(address=args.address, log_to_driver=False)
    else:
        ray.init(
            address="local",
            num_cpus=args.cpus,
            include_dashboard=False,
            _temp_dir=temp,
            log_to_driver=False,
        )
    ray.data.DataContext.get_current().enable_progress_bars = False
    text = workload.output == "embedding"
    blocks = args.workers * TEXT_BLOCKS_PER_ACTOR if text else None
    ds = ray.data.read_parquet(workload.data, columns=["id", *workload.features])
    if blocks:
        ds = ds.repartition(blocks)
    ds = ds.map_batches(
        Predict,
        fn_constructor_args=(workload_json, args.threads, args.model_batch or args.batch_size),
        batch_size=args.batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=args.workers),
        num_cpus=ACTOR_CPUS,
    )
    ds.write_parquet(str(args.out))
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)  # kept when Ray fails: its logs are there


if __name__ == "__main__":
    main()
