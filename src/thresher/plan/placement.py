"""Where a job's shards run: how many workers, threads in each, and the GPU each sees."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from thresher.plan.devices import HIDDEN, run_gpus
from thresher.spec import RunSection


@dataclass(frozen=True)
class Measured:
    """Threads or processes, as earlier jobs of the model measured them (plan/history.py
    chooses), and why, as the job's placement line says it."""

    threads: bool
    reason: str


@dataclass(frozen=True)
class Placement:
    """How many worker processes, how many compute threads in each, and the GPU each
    worker slot sees (its CUDA_VISIBLE_DEVICES; None: left as the coordinator's)."""

    workers: int
    threads: int
    devices: tuple[str, ...] | None = None
    # The one worker is a thread of the coordinator (executors/inline.py): a job of one
    # shard on the CPU, where a worker process would cost its start and gain nothing.
    inline: bool = False
    # Worker processes are forked from one that loaded the model (executors/zygote.py):
    # local CPU workers, unless `run.start_method = "spawn"`.
    forked: bool = False
    # Why threads or processes, when earlier jobs of the model measured it (plan/history.py).
    measured: str = ""

    @property
    def device(self) -> str:
        return "cuda" if self.devices and any(self.devices) else "cpu"

    def describe(self) -> str:
        where = f", GPU {', '.join(self.devices or ())}" if self.device == "cuda" else ""
        why = f" ({self.measured})" if self.measured else ""
        if self.inline:
            return f"1 worker in this process x {self.threads} thread(s){why}"
        forked = ", forked from one model load" if self.forked else ""
        return f"{self.workers} worker(s) x {self.threads} thread(s){where}{forked}{why}"


def worker_slots(run: RunSection, gpus: list[str] | None = None) -> int:
    """The most workers a run uses: `run.workers`, else one per GPU it runs on (`gpus`,
    found if not given), else one per core."""
    gpus = run_gpus(run) if gpus is None else gpus
    return run.workers or len(gpus) or os.cpu_count() or 1


def measurable(run: RunSection, shard_count: int) -> bool:
    """Whether a job may run as threads or as processes, whichever its model's earlier
    jobs measured faster (plan/history.py): several shards on a local machine's cores,
    with no `run.workers` set and no GPU to place."""
    cores = os.cpu_count() or 1
    local_cpu = run.executor == "local" and run.device != "cpu" and not run_gpus(run)
    return local_cpu and run.workers is None and shard_count > 1 and cores > 1


def plan_placement(
    run: RunSection, shard_count: int, measured: Measured | None = None
) -> Placement:
    """One worker per GPU, or per core, unless the spec says otherwise, never more workers
    than shards; the cores are shared out as threads so none is oversubscribed. GPU workers
    take the GPUs in turn; a `cpu` run hides them from its workers. A job of one shard with
    no GPU to place runs its worker in the coordinator's process (`inline`); more CPU
    workers are forked from one process that loaded the model (`forked`), unless what its
    earlier jobs `measured` says the same cores as threads of one inline worker are faster.
    """
    cores = os.cpu_count() or 1
    if measured is not None and measurable(run, shard_count):
        if measured.threads:
            return Placement(1, cores, None, inline=True, measured=measured.reason)
        placed = plan_placement(run, shard_count)
        return replace(placed, measured=measured.reason)
    gpus = run_gpus(run)
    workers = max(1, min(worker_slots(run, gpus), max(shard_count, 1)))
    devices: tuple[str, ...] | None = None
    if gpus:
        devices = tuple(gpus[slot % len(gpus)] for slot in range(workers))
    elif run.device == "cpu":
        devices = (HIDDEN,) * workers
    threads = max(1, cores // workers)
    inline = shard_count == 1 and devices is None
    # pidfd_open: how the coordinator watches a worker it did not start (Linux 5.3+)
    forks = run.start_method == "auto" and hasattr(os, "pidfd_open")
    forked = run.executor == "local" and not inline and not gpus and forks
    return Placement(workers, threads, devices, inline=inline, forked=forked)
