"""The Ray executor: the same shards on a pool of Ray actors, for a cluster.

Each actor loads the model once and runs whole shards with the very same `run_shard` the
local workers use; parts go to the sink's storage (shared by every node: S3, NFS), and
the coordinator commits them exactly as with local processes. Ray does placement, data
transfer and node failure: an actor that dies (or whose node does) surfaces as a failed
attempt, and a fresh actor takes its place.

Without `run.address`, a job joins the cluster named in `THRESHER_RAY_ADDRESS` (the one a
`thresher serve` keeps for its jobs, `service/ray_cluster.py`), or else starts a Ray of
its own for its run. On the server's cluster the CPU actors stay warm between jobs: named
after the model, its options and the job's features and threads, detached from the job,
they keep the loaded model for the server's next job of the same model, which finds them
by name (jobs of one model at once share them, each task naming its job's setup). They
ask Ray for no CPU (an idle one would hold its share for good); the server's slots share
the machine. An actor running a task when its job stops is killed, as it would be on a
Ray of the job's own; idle ones, and ones still loading, are left for the next job, and
die with the server's Ray.

On small machines an actor asks for less than a whole CPU by default, so the pool never
starves Ray's own tasks. Ray's token authentication (RAY_AUTH_MODE=token, the default for
local clusters in current Ray) is left on: to join a cluster started with it, the
coordinator needs the same token (RAY_AUTH_TOKEN or the default token file).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from thresher.errors import ThresherError
from thresher.models.base import LoadContext
from thresher.plan.placement import Placement
from thresher.spec import ModelSection, RunSection
from thresher.worker.tasks import (
    NOT_RETRYABLE,
    Event,
    Progress,
    ShardDone,
    ShardFailed,
    ShardResult,
    Task,
    WorkerSetup,
)

log = logging.getLogger("thresher.executors.ray_pool")

# A running cluster to join when `run.address` is unset (the server's, for its jobs).
CLUSTER_VARIABLE = "THRESHER_RAY_ADDRESS"


class ShardActor:
    """A Ray actor: the model loaded once, shards run one at a time, for one job's setup
    or, warm on a server's cluster, for each job that `prepare`d one."""

    def __init__(self, model: ModelSection, context: LoadContext) -> None:
        from thresher.models import load_model

        self.model = load_model(model, context)
        self.jobs: dict[str, tuple[WorkerSetup, Any]] = {}

    def ready(self) -> bool:
        return True

    def prepare(self, job: str, setup: WorkerSetup) -> None:
        """Take `job`'s setup (its reader, parts, batch settings) for its tasks."""
        from thresher.worker.shard import tuner_for

        self.jobs[job] = (setup, tuner_for(setup.batch, self.model))

    def forget(self, job: str) -> None:
        self.jobs.pop(job, None)

    def run(self, job: str, task: Task) -> ShardResult:
        from thresher.worker.run import run_task

        setup, tuner = self.jobs[job]
        return run_task(setup, self.model, task, lambda rows: None, tuner)


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
    _job: str = field(default_factory=lambda: uuid.uuid4().hex, init=False)
    _warm: str | None = field(default=None, init=False)  # warm actors' name prefix
    _own: set[Any] = field(default_factory=set, init=False)  # replacements: killed at the end
    _idle: list[Any] = field(default_factory=list, init=False)
    _running: dict[Any, _Running] = field(default_factory=dict, init=False)
    _queue: deque[Task] = field(default_factory=deque, init=False)
    _starting: dict[Any, Any] = field(default_factory=dict, init=False)  # ready ref -> actor
    _actor_class: Any = field(default=None, init=False)
    _actor_options: dict[str, Any] = field(default_factory=dict, init=False)
    _started_ray: bool = field(default=False, init=False)
    _lost: int = field(default=0, init=False)  # actors that died before they were up

    def start(self, setup: WorkerSetup) -> None:
        ray = import_ray()
        server = None
        if not ray.is_initialized():
            try:
                # No address means the server's cluster, or a Ray of this job's own:
                # "local", never one that some earlier `ray start` left recorded (and that
                # may be long dead).
                server = None if self.run.address else os.environ.get(CLUSTER_VARIABLE)
                address = self.run.address or server or "local"
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
        if server and not gpus:  # joined the server's cluster above
            # Warm actors ask Ray for no CPU: idle, they would hold their share for good,
            # and the next job of another model would wait for it forever. The server's
            # own slots (`capacity.cpu`) share its machine between its jobs.
            self._warm, options["num_cpus"] = _warm_name(setup, self.run), 0
        self._actor_class = ray.remote(ShardActor)
        self._actor_options = {"max_restarts": 0, **options}
        for slot in range(self.workers):
            self._replace(slot)
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
        running = [r.actor for r in self._running.values()]
        waiting = [*self._starting.values(), *self._idle]
        warm = [a for a in waiting if a not in self._own] if self._warm else []
        for actor in [*running, *(a for a in waiting if a not in warm)]:
            ray.kill(actor)
        for actor in warm:  # kept (or still loading) for the server's next job
            actor.forget.remote(self._job)
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

    def _replace(self, slot: int | None = None) -> None:
        """An actor for pool slot `slot`: on a server's cluster the warm one of that name
        if it lives, else a fresh one (it loads the model). With no slot, a fresh one of
        this job's own in place of one that died (its warm name may not be free yet); a
        server's next job starts that slot's warm actor again. It takes work only once it
        is up: until Ray finds room for it, the others carry on."""
        assert self._setup is not None
        setup, options = self._setup, self._actor_options
        if self._warm is not None and slot is not None:
            name = f"{self._warm}-{slot}"
            # Named in one namespace: each job's driver has an anonymous one of its own.
            warm = {"name": name, "namespace": "thresher", "lifetime": "detached"}
            options = {**options, **warm, "get_if_exists": True}
        actor = self._actor_class.options(**options).remote(setup.model, setup.context)
        if slot is None:
            self._own.add(actor)
        actor.prepare.remote(self._job, setup)  # in order, after its model loads
        self._starting[actor.ready.remote()] = actor

    def _dispatch(self) -> None:
        while self._idle and self._queue:
            actor, task = self._idle.pop(), self._queue.popleft()
            self._running[actor.run.remote(self._job, task)] = _Running(actor, task)

    def _cpus_per_actor(self, ray: Any) -> float:
        """`run.num_cpus`, or a share that leaves room for Ray's own work on small
        clusters: at most one CPU, never the last one on the cluster."""
        if self.run.num_cpus is not None:
            return self.run.num_cpus
        total = float(ray.cluster_resources().get("CPU", 1.0))
        share = (total - 0.5) / max(self.workers, 1)
        return max(0.1, min(1.0, round(share, 2)))


def _warm_name(setup: WorkerSetup, run: RunSection) -> str:
    """The name prefix of the warm actors a job can share: those that loaded the same
    model, with the same options, for the same features and threads, on the same
    resources."""
    key = json.dumps(
        [
            setup.model.model_dump(mode="json"),
            list(setup.context.features),
            setup.context.threads,
            run.num_cpus,
            run.num_gpus,
            run.device,
        ],
        sort_keys=True,
    )
    return f"thresher-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


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
