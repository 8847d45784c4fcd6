"""Threads or processes for a CPU job, chosen by how this model's earlier jobs ran.

A job of several shards on a machine's cores runs either as one worker per core, each a
process with one compute thread (forked from one model load), or as one worker in the
coordinator's process whose model and pipeline use every core as threads (the inline
executor). Which is faster is the model's to say, not the planner's to guess
(`benchmarks/results/threads-or-processes.md`): compiled LightGBM trees run faster as
threads (they release the GIL, and one process pays no worker start and no hand-over
between processes), MiniLM as processes (torch's intra-op threads scale worse on its
small batches than two processes do), and the ONNX MLP is near a tie that the machine's
load decides.

So every CPU job's manifest says how it ran and how fast, and the next job of the same
model on the same store reads them: with only one way measured it tries the other once,
with both it takes the one that finished a job of the nearest size sooner. `run.workers`
set, a GPU, or another executor: the planner's rule, nothing measured.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from thresher.models import model_fingerprint
from thresher.plan.placement import Measured, Placement, measurable, plan_placement

if TYPE_CHECKING:
    from thresher.sources import Shard
    from thresher.spec import JobSpec
    from thresher.store import Store

__all__ = ["PastRun", "choose", "known_rows", "measured_choice", "past_runs", "place"]

RECENT_JOBS = 20  # the latest jobs of a model looked at: older ones are measured again


@dataclass(frozen=True)
class PastRun:
    """One earlier job of the model: whether its worker used threads (in the
    coordinator's process) or processes, and how long its rows took."""

    threads: bool
    rows: int
    seconds: float

    def seconds_for(self, rows: int) -> float:
        return self.seconds * rows / self.rows


def place(spec: JobSpec, shards: Sequence[Shard], store: Store) -> Placement:
    """Where a job's shards run (`plan_placement`): as threads or as processes, whichever
    the model's earlier jobs on `store` measured faster, where the run leaves it open."""
    measured = None
    if measurable(spec.run, len(shards)):
        measured = measured_choice(store, spec, known_rows(shards))
    return plan_placement(spec.run, len(shards), measured)


def known_rows(shards: Sequence[Shard]) -> int | None:
    """The shards' rows, None unless every shard's count is known (Parquet's is)."""
    if not shards or any(shard.rows is None for shard in shards):
        return None
    return sum(int(shard.rows) for shard in shards if shard.rows is not None)


def measured_choice(store: Store, spec: JobSpec, rows: int | None) -> Measured | None:
    """Threads or processes for a job of `rows` rows (None: unknown) of `spec`'s model,
    from the store's record of its earlier jobs; None when nothing was measured yet."""
    return choose(past_runs(store, spec), rows)


def past_runs(store: Store, spec: JobSpec) -> list[PastRun]:
    """The model's latest local CPU jobs on this machine's number of cores."""
    manifests = store.manifests_of(spec.model.uri, RECENT_JOBS)
    if not manifests:  # the model's first job here: no file to hash for nothing
        return []
    model = {"kind": spec.model.kind, **model_fingerprint(spec.model)}
    cores = os.cpu_count() or 1
    return [run for m in manifests if (run := _past_run(m, model, cores)) is not None]


def _past_run(manifest: dict[str, Any], model: dict[str, Any], cores: int) -> PastRun | None:
    run = manifest.get("spec", {}).get("run", {})
    rows = round((manifest.get("rows_per_second") or 0) * (manifest.get("seconds") or 0))
    comparable = (
        manifest.get("model") == model
        and manifest.get("device") == "cpu"
        and run.get("executor") == "local"
        and manifest.get("workers", 0) * manifest.get("threads_per_worker", 0) == cores
    )
    if not comparable or rows <= 0:
        return None
    return PastRun(bool(manifest.get("worker_in_process")), rows, float(manifest["seconds"]))


def choose(past: Sequence[PastRun], rows: int | None) -> Measured | None:
    """Try the way not measured yet; with both measured, the one whose runs of about
    the size of `rows` (scaled to `rows`) took less time."""
    threads = [run for run in past if run.threads]
    processes = [run for run in past if not run.threads]
    if not threads and not processes:
        return None
    if not threads:
        return Measured(True, "threads tried: only processes measured for this model so far")
    if not processes:
        return Measured(False, "processes tried: only threads measured for this model so far")
    size = rows or max(run.rows for run in past)
    with_threads, with_processes = _best(threads, size), _best(processes, size)
    winner = "threads" if with_threads <= with_processes else "processes"
    figures = f"threads {with_threads:.2f} s, processes {with_processes:.2f} s for {size:,} rows"
    return Measured(winner == "threads", f"{winner} measured faster for this model: {figures}")


def _best(runs: Sequence[PastRun], rows: int) -> float:
    """The fastest of `runs` of about the size nearest `rows` (within a factor of two of
    it), scaled to `rows`: one slow run on a busy machine does not turn the choice."""
    nearest = min(abs(math.log(run.rows / rows)) for run in runs)
    alike = [run for run in runs if abs(math.log(run.rows / rows)) <= nearest + math.log(2)]
    return min(run.seconds_for(rows) for run in alike)
