"""`/v1/triggers`: the caller's dataset-arrival triggers — the config's that start its
jobs (read-only: only the operator changes them, 409) and its own, which it creates,
changes, pauses, resumes and deletes here — each with the files it has taken and its
last set. Another tenant's trigger answers 404, exactly as one that never was.

A tenant's trigger takes effect at the watcher's next look, without a restart. Deleting
one stops it; the files it took stay taken (re-creating it does not take them again)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Response
from pydantic import BaseModel, ValidationError

from thresher.errors import describe_errors
from thresher.service.errors import Conflict, NotFound, Unprocessable
from thresher.service.policies.auth import Tenant
from thresher.service.policies.quotas import check_poll, over_limit
from thresher.service.state import ServiceState, StateDep
from thresher.service.triggers import Watched, check_trigger, every_trigger, warn_trigger
from thresher.store import AtLimit, TriggerExists
from thresher.triggers.settings import TriggerRequest, TriggerSettings

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
    declared: Literal["config", "tenant"]
    watch: str
    table: str | None = None  # a table trigger's format: it takes versions, not files
    pattern: str
    marker: str | None
    settle_seconds: float
    poll_seconds: float
    reprocess_changed: bool
    paused: bool
    # Why the watcher paused it (failing too often in a row); resuming it clears it.
    paused_reason: str | None = None
    job: dict[str, Any]
    files_seen: int
    last_set: TriggerSetInfo | None
    created_at: str | None = None
    updated_at: str | None = None
    warnings: list[str] = []  # odd but allowed (a pattern that matches no file yet)


class TriggerList(BaseModel):
    data: list[TriggerInfo]


def _visible(state: ServiceState, tenant: str) -> list[Watched]:
    return every_trigger(state.config, state.store, tenant=tenant)


def _find(state: ServiceState, tenant: str, name: str) -> Watched:
    for watched in _visible(state, tenant):
        if watched.name == name:
            return watched
    raise NotFound(f"no trigger named {name!r}")


def _own(state: ServiceState, tenant: str, name: str) -> Watched:
    """The tenant's own trigger `name`: Conflict for a config trigger."""
    watched = _find(state, tenant, name)
    if watched.declared == "config":
        raise Conflict(
            f"trigger {name!r} is declared in the server config; only its operator changes it"
        )
    return watched


def _checked(state: ServiceState, request: TriggerRequest, tenant: str) -> TriggerSettings:
    """The request's settings for `tenant`; Unprocessable naming each field in trouble,
    TooManyRequests if it would poll faster than the tenant's limit allows."""
    problems = check_trigger(state.config, request)
    if problems:
        raise Unprocessable(problems)
    check_poll(tenant, state.config.limits(tenant), request.poll_seconds)
    return request.settings(tenant)


@router.get("", summary="List the caller's triggers")
def list_triggers(state: StateDep, tenant: Tenant) -> TriggerList:
    """The config's triggers that start the caller's jobs, then its own, by name."""
    found = sorted(_visible(state, tenant), key=lambda t: (t.declared, t.name))
    return TriggerList(data=[_describe(state, t) for t in found])


@router.get("/{name}", summary="One of the caller's triggers")
def get_trigger(name: str, state: StateDep, tenant: Tenant) -> TriggerInfo:
    """Its rule, how many files it has taken, and its last set (with its job)."""
    return _describe(state, _find(state, tenant, name))


@router.post("", status_code=201, summary="Create a trigger")
def create_trigger(request: TriggerRequest, state: StateDep, tenant: Tenant) -> TriggerInfo:
    """A trigger that starts `job` (a POST /v1/jobs body with no input: the trigger gives
    it `source.files`) for each complete set of new files under `watch`, for the caller.
    422 naming the field (`watch` outside `allowed_roots`, `job.model` unknown); 409 if
    the caller has a trigger of that name. `warnings` says what is odd but allowed."""
    settings = _checked(state, request, tenant)
    if any(t.name == request.name for t in _visible(state, tenant)):
        raise Conflict(f"name: there is already a trigger {request.name!r}")
    limit = state.config.limits(tenant).triggers
    try:
        state.store.trigger_defs.create(
            tenant, request.name, settings.model_dump_json(), settings.paused, limit
        )
    except TriggerExists as exc:
        raise Conflict(str(exc)) from None
    except AtLimit as exc:
        has = f"{exc.used:,} triggers"
        raise over_limit(tenant, "triggers", limit, has, "delete one first") from None
    return _describe(state, _find(state, tenant, request.name), warn_trigger(settings))


@router.patch("/{name}", summary="Change a trigger")
def change_trigger(
    name: str, state: StateDep, tenant: Tenant, changes: Annotated[dict[str, Any], Body()]
) -> TriggerInfo:
    """Replace the fields given (`job` as a whole); the rest stay. Files it took stay
    taken; a new pattern counts from the next look."""
    current = _own(state, tenant, name)
    if changes.get("name", name) != name:
        raise Unprocessable(["name: a trigger cannot be renamed; create a new one"])
    fields = {**current.settings.model_dump(mode="json", exclude={"tenant"}), **changes}
    try:
        request = TriggerRequest.model_validate({**fields, "name": name})
    except ValidationError as exc:
        raise Unprocessable(describe_errors(exc, TriggerRequest)) from None
    settings = _checked(state, request, tenant)
    state.store.trigger_defs.replace(tenant, name, settings.model_dump_json(), settings.paused)
    return _describe(state, _find(state, tenant, name), warn_trigger(settings))


@router.delete("/{name}", status_code=204, summary="Delete a trigger")
def delete_trigger(name: str, state: StateDep, tenant: Tenant) -> Response:
    """No more sets from the next look on; jobs it started are left as they are, and the
    files it took stay taken (a trigger made again by this name does not take them)."""
    _own(state, tenant, name)
    state.store.trigger_defs.delete(tenant, name)
    return Response(status_code=204)


@router.post("/{name}/pause", summary="Pause a trigger")
def pause_trigger(name: str, state: StateDep, tenant: Tenant) -> TriggerInfo:
    """No set is taken while paused; files that arrive meanwhile are taken on resume."""
    return _set_paused(state, _own(state, tenant, name), True)


@router.post("/{name}/resume", summary="Resume a trigger")
def resume_trigger(name: str, state: StateDep, tenant: Tenant) -> TriggerInfo:
    """Sets are taken again from the next look on."""
    return _set_paused(state, _own(state, tenant, name), False)


def _set_paused(state: ServiceState, watched: Watched, paused: bool) -> TriggerInfo:
    s = watched.settings.model_copy(update={"paused": paused})
    state.store.trigger_defs.replace(s.tenant, watched.name, s.model_dump_json(), paused)
    return _describe(state, _find(state, s.tenant, watched.name))


def _describe(
    state: ServiceState, watched: Watched, warnings: list[str] | None = None
) -> TriggerInfo:
    ledger, t = state.store.triggers, watched.settings
    recent = ledger.recent(watched.key, limit=1)
    last = None
    if recent:
        r = recent[0]
        last = TriggerSetInfo(
            key=r.key, outcome=r.outcome.value, files=r.files, job_id=r.job_id,
            message=r.message, claimed_at=r.claimed_at,
        )  # fmt: skip
    return TriggerInfo(
        name=watched.name, declared=watched.declared, watch=t.watch, table=t.table,
        pattern=t.pattern,
        marker=t.marker, settle_seconds=t.settle, poll_seconds=t.poll_seconds,
        reprocess_changed=t.reprocess_changed, paused=t.paused,
        paused_reason=watched.paused_reason, job=t.job,
        files_seen=ledger.files_seen().get(watched.key, 0), last_set=last,
        created_at=watched.created_at, updated_at=watched.updated_at, warnings=warnings or [],
    )  # fmt: skip
