"""`/v1/triggers`: the caller's dataset-arrival triggers (read-only; they are declared in
the server's config), each with the files it has taken and its last set. Another
tenant's trigger answers 404, exactly as one that never was."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from thresher.service.errors import NotFound
from thresher.service.policies.auth import Tenant
from thresher.service.state import ServiceState, StateDep
from thresher.store.triggers import TriggerLedger

router = APIRouter(prefix="/v1/triggers", tags=["triggers"])


class TriggerSetInfo(BaseModel):
    key: str
    outcome: str  # claimed, started, empty, failed
    files: int
    job_id: str | None
    message: str | None
    claimed_at: str


class TriggerInfo(BaseModel):
    name: str
    watch: str
    pattern: str
    marker: str | None
    settle_seconds: float
    poll_seconds: float
    reprocess_changed: bool
    paused: bool
    files_seen: int
    last_set: TriggerSetInfo | None


class TriggerList(BaseModel):
    data: list[TriggerInfo]


@router.get("", summary="List the caller's triggers")
def list_triggers(state: StateDep, tenant: Tenant) -> TriggerList:
    """Every trigger of the server's config that starts the caller's jobs."""
    seen = TriggerLedger(state.store.db).files_seen()
    names = [n for n, t in state.config.triggers.items() if t.tenant == tenant]
    return TriggerList(data=[_describe(state, n, seen.get(n, 0)) for n in names])


@router.get("/{name}", summary="One of the caller's triggers")
def get_trigger(name: str, state: StateDep, tenant: Tenant) -> TriggerInfo:
    """Its rule, how many files it has taken, and its last set (with its job)."""
    trigger = state.config.triggers.get(name)
    if trigger is None or trigger.tenant != tenant:
        raise NotFound(f"no trigger named {name!r}")
    return _describe(state, name, TriggerLedger(state.store.db).files_seen().get(name, 0))


def _describe(state: ServiceState, name: str, files_seen: int) -> TriggerInfo:
    t = state.config.triggers[name]
    recent = TriggerLedger(state.store.db).recent(name, limit=1)
    last = None
    if recent:
        r = recent[0]
        last = TriggerSetInfo(
            key=r.key, outcome=r.outcome.value, files=r.files, job_id=r.job_id,
            message=r.message, claimed_at=r.claimed_at,
        )  # fmt: skip
    return TriggerInfo(
        name=name, watch=t.watch, pattern=t.pattern, marker=t.marker, settle_seconds=t.settle,
        poll_seconds=t.poll_seconds, reprocess_changed=t.reprocess_changed, paused=t.paused,
        files_seen=files_seen, last_set=last,
    )  # fmt: skip
