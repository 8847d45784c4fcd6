"""`/v1/schedules`: a tenant's own cron schedules — create, list, read, change, delete,
pause, resume, trigger now — and their ticks. The config's schedules for the tenant are
listed and readable too, but only the operator changes them (409). Another tenant's
schedule answers 404, as one that never was."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from pydantic import ValidationError

from thresher.errors import describe_errors
from thresher.schedules import Cron, CronError
from thresher.schedules.settings import ScheduleRequest
from thresher.service.errors import Conflict, NotFound, Unprocessable
from thresher.service.policies.auth import Tenant
from thresher.service.policies.quotas import over_limit
from thresher.service.schedules import (
    Scheduled,
    UnknownSchedule,
    check_schedule,
    every_schedule,
    set_paused,
    trigger,
)
from thresher.service.schemas import FireTime, ScheduleInfo, ScheduleList, TickInfo, TickList
from thresher.service.state import ServiceState, StateDep
from thresher.store import AtLimit, ScheduleExists, Tick

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])

NEXT_FIRES = 5


def tenant_schedule(state: ServiceState, tenant: str, name: str) -> Scheduled:
    """The tenant's schedule `name` (its own, or a config schedule run for it)."""
    for schedule in _visible(state, tenant):
        if schedule.name == name:
            return schedule
    raise NotFound(f"no schedule {name!r}")


def own_schedule(state: ServiceState, tenant: str, name: str) -> Scheduled:
    """The tenant's own schedule `name`: Conflict for a config schedule."""
    schedule = tenant_schedule(state, tenant, name)
    if schedule.declared == "config":
        raise Conflict(
            f"schedule {name!r} is declared in the server config; only its operator changes it"
        )
    return schedule


def _visible(state: ServiceState, tenant: str) -> list[Scheduled]:
    return every_schedule(state.config, state.store, tenant=tenant)


def describe(state: ServiceState, schedule: Scheduled) -> ScheduleInfo:
    settings, cron = schedule.settings, schedule.settings.schedule
    fires = [
        FireTime(local=t.astimezone(cron.zone).isoformat(), utc=t.isoformat())
        for t in cron.after(datetime.now(UTC), NEXT_FIRES)
    ]
    recent = state.store.ticks.recent(schedule.key, limit=1)
    return ScheduleInfo(
        name=schedule.name,
        error=_fire_problem(cron),
        declared=schedule.declared,
        cron=settings.cron,
        timezone=settings.timezone,
        paused=schedule.paused,
        paused_reason=schedule.paused_reason,
        catchup=settings.catchup.value,
        max_catchup=settings.max_catchup,
        starting_deadline=settings.starting_deadline,
        overlap=settings.overlap,
        job=settings.job,
        next_fire_times=fires,
        last_tick=_tick(recent[0]) if recent else None,
        created_at=schedule.created_at,
        updated_at=schedule.updated_at,
    )


def _fire_problem(cron: Cron) -> str | None:
    """Why the schedule will not fire (a cron stored before such were refused at
    creation), or None: the listing shows it rather than failing on it."""
    try:
        cron.check_fires(datetime.now(UTC))
    except CronError as exc:
        return str(exc)
    return None


def _tick(tick: Tick) -> TickInfo:
    return TickInfo(
        nominal_time=tick.nominal.isoformat(),
        outcome=tick.outcome.value,
        job_id=tick.job_id,
        message=tick.message,
        manual=tick.manual,
        backfill=tick.backfill,
    )


def _checked(state: ServiceState, request: ScheduleRequest) -> None:
    problems = check_schedule(state.config, request)
    if problems:
        raise Unprocessable(problems)


@router.post("", status_code=201, summary="Create a schedule")
def create_schedule(request: ScheduleRequest, state: StateDep, tenant: Tenant) -> ScheduleInfo:
    """A cron schedule that submits `job` (a POST /v1/jobs body) at each fire time, in
    `timezone`. 409 if the tenant has a schedule of that name."""
    _checked(state, request)
    if any(s.name == request.name for s in _visible(state, tenant)):
        raise Conflict(f"name: there is already a schedule {request.name!r}")
    settings = request.settings(tenant)
    limit = state.config.limits(tenant).schedules
    try:
        state.store.schedules.create(tenant, request.name, settings.model_dump_json(), limit)
    except ScheduleExists as exc:
        raise Conflict(str(exc)) from None
    except AtLimit as exc:
        has = f"{exc.used:,} schedules"
        raise over_limit(tenant, "schedules", limit, has, "delete one first") from None
    return describe(state, tenant_schedule(state, tenant, request.name))


@router.get("", summary="List schedules")
def list_schedules(state: StateDep, tenant: Tenant) -> ScheduleList:
    """The tenant's schedules, by name: its own and the config's run for it."""
    found = sorted(_visible(state, tenant), key=lambda s: s.name)
    return ScheduleList(data=[describe(state, s) for s in found])


@router.get("/{name}", summary="A schedule, with its next fire times")
def get_schedule(name: str, state: StateDep, tenant: Tenant) -> ScheduleInfo:
    return describe(state, tenant_schedule(state, tenant, name))


@router.patch("/{name}", summary="Change a schedule")
def change_schedule(
    name: str, state: StateDep, tenant: Tenant, changes: Annotated[dict[str, Any], Body()]
) -> ScheduleInfo:
    """Replace the fields given (`job` as a whole); the rest stay. Its ticks so far stay
    in the ledger: a fire time already decided is not decided again."""
    current = own_schedule(state, tenant, name)
    if changes.get("name", name) != name:
        raise Unprocessable(["name: a schedule cannot be renamed; create a new one"])
    fields = {**current.settings.model_dump(mode="json", exclude={"tenant"}), **changes}
    try:
        request = ScheduleRequest.model_validate({**fields, "name": name})
    except ValidationError as exc:
        raise Unprocessable(describe_errors(exc, ScheduleRequest)) from None
    _checked(state, request)
    state.store.schedules.replace(tenant, name, request.settings(tenant).model_dump_json())
    return describe(state, tenant_schedule(state, tenant, name))


@router.delete("/{name}", status_code=204, summary="Delete a schedule")
def delete_schedule(name: str, state: StateDep, tenant: Tenant) -> Response:
    """No more ticks; jobs it started are left as they are."""
    own_schedule(state, tenant, name)
    state.store.schedules.delete(tenant, name)
    return Response(status_code=204)


@router.post("/{name}/pause", summary="Pause a schedule")
def pause_schedule(name: str, state: StateDep, tenant: Tenant) -> ScheduleInfo:
    """No tick fires while paused; its fire times are recorded as skipped."""
    schedule = set_paused(state.config, state.store, own_schedule(state, tenant, name).key, True)
    return describe(state, schedule)


@router.post("/{name}/resume", summary="Resume a schedule")
def resume_schedule(name: str, state: StateDep, tenant: Tenant) -> ScheduleInfo:
    """Ticks fire again from the next fire time on."""
    schedule = set_paused(state.config, state.store, own_schedule(state, tenant, name).key, False)
    return describe(state, schedule)


@router.post("/{name}/trigger", status_code=202, summary="Run a schedule now")
def trigger_schedule(name: str, state: StateDep, tenant: Tenant) -> TickInfo:
    """A manual tick, now (even while paused): its job starts within moments, under the
    schedule's overlap policy; read it from `GET /v1/schedules/{name}/ticks`."""
    key = own_schedule(state, tenant, name).key
    try:
        at = trigger(state.config, state.store, key)
    except UnknownSchedule as exc:
        raise Conflict(str(exc)) from None
    state.ticks_waiting.set()
    return TickInfo(
        nominal_time=at.isoformat(), outcome="claimed", job_id=None, message=None, manual=True
    )


@router.get("/{name}/ticks", summary="A schedule's ticks, newest first")
def list_ticks(
    name: str,
    state: StateDep,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> TickList:
    schedule = tenant_schedule(state, tenant, name)
    ticks = state.store.ticks.recent(schedule.key, limit=limit)
    return TickList(data=[_tick(t) for t in ticks])
