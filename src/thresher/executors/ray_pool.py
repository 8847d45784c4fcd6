"""The Ray executor: the same shards on a pool of Ray actors, for a cluster.

Each actor loads the model once and runs whole shards with the very same `run_shard` the
local workers use; parts go to the sink's storage (shared by every node: S3, NFS), and
the coordinator commits them exactly as with local processes. Ray does placement, data
transfer and node failure: an actor that dies (or whose node does) surfaces as a failed
attempt, and a fresh actor takes its place.

Without `run.address`, a job joins the cluster named in `THRESHER_RAY_ADDRESS` (the one a
`thresher serve` keeps for its jobs, `service/ray_cluster.py`), or else starts a Ray of
its own for its run.

On small machines an actor asks for less than a whole CPU by default, so the pool never
starves Ray's own tasks. Ray's token authentication (RAY_AUTH_MODE=token, the default for
local clusters in current Ray) is left on: to join a cluster started with it, the
coordinator needs the same token (RAY_AUTH_TOKEN or the default token file).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from thresher.errors import ThresherError
from thresher.executors.tasks import (
    NOT_RETRYABLE,
    Event,
    Progress,
    ShardDone,
    ShardFailed,
    ShardResult,
    Task,
    WorkerSetup,
)
from thresher.plan.placement import Placement
from thresher.spec import RunSection

log = logging.getLogger("thresher.executors.ray_pool")

# A running cluster to join when `run.address` is unset (the server's, for its jobs).
CLUSTER_VARIABLE = "THRESHER_RAY_ADDRESS"


class ShardActor:
    """A Ray actor: the model loaded once, shards run one at a time."""

    def __init__(self, setup: WorkerSetup) -> None:
        from thresher.models import load_model
        from thresher.worker.shard import tuner_for

        self.setup = setup
        self.model = load_model(setup.model, setup.context)
        self.tuner = tuner_for(setup.batch, self.model)

    def ready(self) -> bool:
        return True

    def run(self, task: Task) -> ShardResult:
        from thresher.worker.run import run_task

        return run_task(self.setup, self.model, task, lambda rows: None, self.tuner)


@dataclass
class _Running:
    actor: Any
    task: Task
    started: float = field(default_factory=time.monotonic)


@dataclass
class RayExecutor:
    """Runs shard tasks on `workers` Ray actors of `num_cpus` / `num_gpus` each."""

    run: RunSection
    workers: int
    _setup: WorkerSetup | None = field(default=None, init=False)
    _idle: list[Any] = field(default_factory=list, init=False)
    _running: dict[Any, _Running] = field(default_factory=dict, init=False)
    _queue: deque[Task] = field(default_factory=deque, init=False)
    _starting: dict[Any, Any] = field(default_factory=dict, init=False)  # ready ref -> actor
    _actor_class: Any = field(default=None, init=False)
    _started_ray: bool = field(default=False, init=False)
    _lost: int = field(default=0, init=False)  # actors that died before they were up

    def start(self, setup: WorkerSetup) -> None:
        ray = import_ray()
        if not ray.is_initialized():
            try:
                # No address means the server's cluster, or a Ray of this job's own:
                # "local", never one that some earlier `ray start` left recorded (and that
                # may be long dead).
                address = self.run.address or os.environ.get(CLUSTER_VARIABLE) or "local"
                ray.init(address=address, log_to_driver=False, **_join_as(self.run))
            except ConnectionError as exc:
                raise ThresherError(f"run.address: {exc}") from exc
            joined = "a Ray of its own" if address == "local" else "Ray"
            log.info("job on %s at %s", joined, ray.get_runtime_context().gcs_address)
            self._started_ray = True
        self._setup = setup
        # run.device = "cuda" on Ray: a GPU per actor unless run.num_gpus says otherwise.
        gpus = self.run.num_gpus or (1.0 if self.run.device == "cuda" else 0.0)
        options = {"num_cpus": self._cpus_per_actor(ray), "num_gpus": gpus}
        self._actor_class = ray.remote(ShardActor).options(max_restarts=0, **options)
        for _ in range(self.workers):
            self._replace()
        while not self._idle and self._starting:  # work starts once one actor is up
            ready, _ = ray.wait(list(self._starting), num_returns=1, timeout=10)
            for ref in ready:
                self._started(ray, ref)

    def submit(self, task: Task) -> None:
        self._queue.append(task)
        self._dispatch()

    def pending(self) -> int:
        return len(self._queue) + len(self._running)

    def events(self, timeout: float = 1.0) -> Iterator[Event]:
        ray = import_ray()
        waiting = [*self._running, *self._starting]
        if waiting:
            ready, _ = ray.wait(waiting, num_returns=1, timeout=timeout)
            for ref in ready:
                if ref in self._starting:
                    self._started(ray, ref)
                else:
                    yield from self._collect(ray, ref)
        else:
            time.sleep(min(timeout, 0.05))
        yield from self._stalled(ray)
        self._dispatch()

    def _started(self, ray: Any, ref: Any) -> None:
        """An actor is up, or it is not: a model that does not load fails the job; an
        actor lost with its node is tried again elsewhere a few times, and past that the
        pool goes on smaller (with no actor left at all, the job cannot go on)."""
        actor = self._starting.pop(ref)
        try:
            ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            if exc.actor_init_failed:
                raise ThresherError(f"a Ray worker could not start: {exc}") from None
            self._lost += 1
            if self._lost <= 2 * self.workers:
                self._replace()
            elif not (self._idle or self._running or self._starting):
                raise ThresherError(f"every Ray worker of this job died: {exc}") from None
            return
        self._idle.append(actor)

    def shutdown(self) -> None:
        ray = import_ray()
        actors = [*self._idle, *self._starting.values(), *(r.actor for r in self._running.values())]
        for actor in actors:
            ray.kill(actor)
        self._idle, self._running, self._starting = [], {}, {}
        if self._started_ray:
            ray.shutdown()

    def _collect(self, ray: Any, ref: Any) -> Iterator[Event]:
        running = self._running.pop(ref)
        try:
            result: ShardResult = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            self._replace()
            yield ShardFailed(running.task, "WorkerLost", f"Ray actor died: {exc}", retry=True)
            return
        except ray.exceptions.RayTaskError as exc:
            self._idle.append(running.actor)
            cause = exc.cause if isinstance(exc.cause, Exception) else exc
            retry = not isinstance(cause, NOT_RETRYABLE)
            yield ShardFailed(running.task, type(cause).__name__, str(cause), retry=retry)
            return
        self._idle.append(running.actor)
        yield Progress(result.shard, result.rows_in)
        yield ShardDone(result)

    def _stalled(self, ray: Any) -> Iterator[Event]:
        """No per-batch progress crosses from an actor, so a shard that runs longer than
        `run.shard_timeout` as a whole is the stall signal here."""
        now = time.monotonic()
        for ref, running in list(self._running.items()):
            if now - running.started > self.run.shard_timeout:
                del self._running[ref]
                ray.kill(running.actor)
                self._replace()
                why = (
                    f"shard ran past {self.run.shard_timeout:g}s (run.shard_timeout); actor killed"
                )
                yield ShardFailed(running.task, "ShardTimeout", why, retry=True)

    def _replace(self) -> None:
        """A fresh actor (it loads the model again) in place of one that died. It takes
        work only once it is up: until Ray finds room for it, the others carry on."""
        assert self._setup is not None
        actor = self._actor_class.remote(self._setup)
        self._starting[actor.ready.remote()] = actor

    def _dispatch(self) -> None:
        while self._idle and self._queue:
            actor, task = self._idle.pop(), self._queue.popleft()
            self._running[actor.run.remote(task)] = _Running(actor, task)

    def _cpus_per_actor(self, ray: Any) -> float:
        """`run.num_cpus`, or a share that leaves room for Ray's own work on small
        clusters: at most one CPU, never the last one on the cluster."""
        if self.run.num_cpus is not None:
            return self.run.num_cpus
        total = float(ray.cluster_resources().get("CPU", 1.0))
        share = (total - 0.5) / max(self.workers, 1)
        return max(0.1, min(1.0, round(share, 2)))


def _join_as(run: RunSection) -> dict[str, Any]:
    """Ray rewrites 127.0.0.1 to the machine's outward address, but any other loopback
    address (127.0.0.2, a "host" of a test cluster on one machine) is taken as given: a
    coordinator on that machine joins as that address."""
    host = (run.address or "").removeprefix("ray://").rpartition(":")[0]
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return {"_node_ip_address": host} if loopback and host != "127.0.0.1" else {}


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ThresherError("run.executor = 'ray' needs `pip install 'thresher[ray]'`") from exc
    return ray


def ray_executor(run: RunSection, placement: Placement) -> RayExecutor:
    """The `ray` executor plug-in: an actor per worker of the placement."""
    return RayExecutor(run=run, workers=placement.workers)
