"""Slot leases: the worker (CPU) and GPU slots each running service job holds.

A server declares its machine's capacity; a job starts only with a lease on slots that
are free, taken in one transaction that sums the leases already held on this host, so two
servers sharing a store (and a host) never hand out the same slot. PostgreSQL serialises
the check with an advisory lock, SQLite with its write lock, taken before the sum is read.

A lease is released when its job's coordinator ends, and reclaimed by the next taker when
the server that holds it is dead (the same liveness rule as orphaned jobs and tick
claims: `_owners.py`; on another host, a heartbeat older than `owner_timeout`), so a
server killed with SIGKILL leaks no slot, on this host or any other. Capacity is per
host: a lease held on another host uses that host's slots, not this one's.
"""

from __future__ import annotations

from dataclasses import dataclass

from thresher.store._db import Cursor, Database, now
from thresher.store._owners import OwnerTable, owner_host, this_host, this_owner

# Any number, the same in every thresher: PostgreSQL advisory lock of the lease table.
_LEASE_LOCK = 7305062


@dataclass(frozen=True)
class Slots:
    """A count of worker (CPU) and GPU slots; as a capacity, also the GPUs' ids
    (`CUDA_VISIBLE_DEVICES` entries; `0` … `gpu - 1` when not given)."""

    cpu: int
    gpu: int
    devices: tuple[str, ...] = ()


# A retry round of a finished job holds its slots under the job's id and this suffix: a
# lease no job row joins, so the scheduler counts its slots but never preempts it.
_ROUND = ".retry"


def retry_lease(job_id: str) -> str:
    """The lease a retry round of job `job_id` holds its slots under."""
    return job_id + _ROUND


@dataclass(frozen=True)
class Lease:
    job_id: str  # or a retry round's `retry_lease`
    owner: str
    tenant: str | None
    priority: int
    cpu: int
    gpu: int
    acquired_at: str
    devices: tuple[str, ...] = ()  # the GPUs it holds, each its own

    @property
    def round_of(self) -> str | None:
        """The job whose retry round holds this lease; None for a job's own."""
        return self.job_id.removesuffix(_ROUND) if self.job_id.endswith(_ROUND) else None


@dataclass(frozen=True)
class SlotRequest:
    """What a job asks for: `want` worker slots, at least `minimum`, each worker with
    `gpu_per_worker` GPU slots; `tenant_cap` bounds the slots its tenant holds in all,
    `tenant_jobs` the leases (running jobs) it holds."""

    job_id: str
    tenant: str | None
    priority: int
    want: int
    minimum: int = 1
    gpu_per_worker: int = 0
    tenant_cap: int | None = None
    tenant_jobs: int | None = None


@dataclass(frozen=True)
class Grant:
    """The answer to a SlotRequest: the slots leased, or none and why (`reason`)."""

    cpu: int
    gpu: int
    reason: str | None = None
    devices: tuple[str, ...] = ()  # which GPUs, none held by another lease on this host
    # The tenant's own worker_slots limit refused it (the host had room): jobs of other
    # tenants may still start.
    tenant_limited: bool = False

    @property
    def granted(self) -> bool:
        return self.reason is None


class SlotLeases:
    """The lease table. Every method is one transaction."""

    def __init__(self, db: Database, owners: OwnerTable) -> None:
        self.db, self.owners = db, owners

    def acquire(self, request: SlotRequest, capacity: Slots) -> Grant:
        """Lease what `request` wants of this host's free slots, or what is free down to
        its minimum; a refusal says which limit stands in the way. Leases of dead owners
        are reclaimed first."""
        with self.db.transaction() as cur:
            self._lock(cur)
            leases = self._reclaim_dead(cur)
            grant = _fit(request, capacity, leases)
            if grant.granted:
                cur.execute(
                    "INSERT INTO thresher_leases (job_id, owner, tenant, priority, cpu, gpu,"
                    " devices, acquired_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (request.job_id, this_owner(), request.tenant, request.priority,
                     grant.cpu, grant.gpu, ",".join(grant.devices), now()),
                )  # fmt: skip
        return grant

    def release(self, job_id: str) -> None:
        """Give the job's slots back (nothing happens when it holds none)."""
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM thresher_leases WHERE job_id = ?", (job_id,))

    def reclaim_dead(self) -> list[str]:
        """Remove the leases of owners that are dead; returns their job ids."""
        with self.db.transaction() as cur:
            self._lock(cur)
            before = {lease.job_id for lease in _all(cur)}
            return sorted(before - {lease.job_id for lease in self._reclaim_dead(cur)})

    def held(self) -> list[Lease]:
        """Every lease in the store, oldest first."""
        with self.db.transaction() as cur:
            return _all(cur)

    def lease(self, job_id: str) -> Lease | None:
        return next((lease for lease in self.held() if lease.job_id == job_id), None)

    def of_job(self, job_id: str, held: list[Lease] | None = None) -> Lease | None:
        """What job `job_id` holds: its coordinator's lease, else its retry round's (among
        `held`, when a caller asking for many jobs read the leases once)."""
        by_id = {lease.job_id: lease for lease in (self.held() if held is None else held)}
        return by_id.get(job_id) or by_id.get(retry_lease(job_id))

    def used(self, host: str | None = None, tenant: str | None = None) -> Slots:
        """Slots leased on `host` (this one by default), by `tenant`'s jobs alone when
        one is given."""
        here = _on_host(self.held(), host or this_host())
        return _sum([lease for lease in here if tenant in (None, lease.tenant)])

    def _lock(self, cur: Cursor) -> None:
        if self.db.dialect == "postgresql":
            cur.execute("SELECT pg_advisory_xact_lock(?)", (_LEASE_LOCK,))
        else:
            # A write first takes SQLite's write lock, so the sum read next is current.
            cur.execute("DELETE FROM thresher_leases WHERE 1 = 0")

    def _reclaim_dead(self, cur: Cursor) -> list[Lease]:
        live, liveness = [], self.owners.judge(cur)
        for lease in _all(cur):
            if liveness.alive(lease.owner):
                live.append(lease)
            else:
                cur.execute("DELETE FROM thresher_leases WHERE job_id = ?", (lease.job_id,))
        return live


def _fit(request: SlotRequest, capacity: Slots, leases: list[Lease]) -> Grant:
    """How many slots `request` gets beside `leases`: the most it wants that are free on
    this host and under its tenant's caps, if that is at least its minimum."""
    if any(lease.job_id == request.job_id for lease in leases):
        return Grant(0, 0, f"job {request.job_id} already holds a lease")
    used = _sum(_on_host(leases, this_host()))
    fits = min(request.want, capacity.cpu - used.cpu)
    reason = f"waiting for worker slots: {used.cpu} of {capacity.cpu} in use"
    if request.gpu_per_worker:
        gpu_fits = (capacity.gpu - used.gpu) // request.gpu_per_worker
        if gpu_fits < max(fits, request.minimum):
            reason = f"waiting for GPU slots: {used.gpu} of {capacity.gpu} in use"
        fits = min(fits, gpu_fits)
    if fits < request.minimum:
        return Grant(0, 0, reason)
    fits, refusal = _tenant_fit(request, leases, fits)
    if refusal is not None:
        return Grant(0, 0, refusal, tenant_limited=True)
    gpus = fits * request.gpu_per_worker
    return Grant(fits, gpus, devices=_free_devices(capacity, leases)[:gpus])


def _tenant_fit(request: SlotRequest, leases: list[Lease], fits: int) -> tuple[int, str | None]:
    """`fits` bounded by the tenant's caps, or why its caps refuse the job."""
    mine = [lease for lease in leases if lease.tenant == request.tenant]
    if request.tenant_jobs is not None and len(mine) >= request.tenant_jobs:
        return 0, (
            f"tenant limit concurrent_jobs: {len(mine)} of {request.tenant_jobs} of its jobs"
            " running"
        )
    if request.tenant_cap is not None:
        held = sum(lease.cpu for lease in mine)
        fits = min(fits, request.tenant_cap - held)
        if fits < request.minimum:
            return 0, f"tenant limit worker_slots: its jobs hold {held} of {request.tenant_cap}"
    return fits, None


def _free_devices(capacity: Slots, leases: list[Lease]) -> tuple[str, ...]:
    ids = capacity.devices or tuple(str(i) for i in range(capacity.gpu))
    held = {d for lease in _on_host(leases, this_host()) for d in lease.devices}
    return tuple(d for d in ids if d not in held)


def _all(cur: Cursor) -> list[Lease]:
    rows = cur.execute(
        "SELECT job_id, owner, tenant, priority, cpu, gpu, acquired_at, devices"
        " FROM thresher_leases ORDER BY acquired_at, job_id"
    ).fetchall()
    return [
        Lease(str(r[0]), str(r[1]), r[2], int(r[3]), int(r[4]), int(r[5]), r[6],
              tuple(d for d in str(r[7] or "").split(",") if d))
        for r in rows
    ]  # fmt: skip


def _on_host(leases: list[Lease], host: str) -> list[Lease]:
    return [lease for lease in leases if owner_host(lease.owner) == host]


def _sum(leases: list[Lease]) -> Slots:
    return Slots(sum(lease.cpu for lease in leases), sum(lease.gpu for lease in leases))
