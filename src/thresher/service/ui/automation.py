"""The dashboard's pages of what starts jobs and what holds them back: schedules (next fire
times, recent ticks and their outcomes, pause, resume, run now), triggers (what each
watches, the files or table versions it took, its last set, pause and resume) and the
queue (the tenant's slots in use, its waiting jobs by priority and why each waits).

Each calls the API's own functions with the signed-in tenant, so a page shows exactly
what the tenant's token would read, and another tenant's schedule or trigger is a 404.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from thresher.service.errors import ServiceError
from thresher.service.routers import schedules as schedules_api
from thresher.service.routers import triggers as triggers_api
from thresher.service.state import StateDep
from thresher.service.ui.frame import back_to, checked, page, session_key, signed_in, to_login

router = APIRouter(prefix="/ui", include_in_schema=False)
TICKS_SHOWN = 5  # a schedule's recent ticks on its row
QUEUE_SHOWN = 200  # waiting jobs listed, the first to start


@router.get("/schedules")
def schedules_page(request: Request, state: StateDep) -> Response:
    session = signed_in(request, state)
    if session is None:
        return to_login()
    shown = []
    for schedule in schedules_api._visible(state, session.tenant):
        info = schedules_api.describe(state, schedule).model_dump(mode="json")
        ticks = state.store.ticks.recent(schedule.key, limit=TICKS_SHOWN)
        info["ticks"] = [schedules_api._tick(t).model_dump(mode="json") for t in ticks]
        shown.append(info)
    return page(
        request, "schedules.html", tenant=session.tenant, csrf=session_key(state).csrf(session),
        schedules=shown,
    )  # fmt: skip


@router.post("/schedules/{name}/{action}")
def schedule_action(
    name: str, action: str, request: Request, state: StateDep, csrf: Annotated[str, Form()] = ""
) -> Response:
    """Pause, resume or run now one of the tenant's own schedules."""
    acts = {
        "pause": schedules_api.pause_schedule,
        "resume": schedules_api.resume_schedule,
        "run": schedules_api.trigger_schedule,
    }
    session = checked(request, state, csrf)
    if session is None or action not in acts:
        return page(request, "missing.html", 403, what="that action (sign in again)")
    try:
        acts[action](name, state, session.tenant)
    except ServiceError as exc:
        return page(request, "missing.html", exc.status, tenant=session.tenant, what=str(exc))
    return back_to("/ui/schedules")


@router.get("/triggers")
def triggers_page(request: Request, state: StateDep) -> Response:
    session = signed_in(request, state)
    if session is None:
        return to_login()
    found = triggers_api.list_triggers(state, session.tenant).data
    return page(
        request, "triggers.html", tenant=session.tenant, csrf=session_key(state).csrf(session),
        triggers=[t.model_dump(mode="json") for t in found],
    )  # fmt: skip


@router.post("/triggers/{name}/{action}")
def trigger_action(
    name: str, action: str, request: Request, state: StateDep, csrf: Annotated[str, Form()] = ""
) -> Response:
    """Pause or resume one of the tenant's own triggers."""
    session = checked(request, state, csrf)
    if session is None or action not in ("pause", "resume"):
        return page(request, "missing.html", 403, what="that action (sign in again)")
    act = triggers_api.pause_trigger if action == "pause" else triggers_api.resume_trigger
    try:
        act(name, state, session.tenant)
    except ServiceError as exc:
        return page(request, "missing.html", exc.status, tenant=session.tenant, what=str(exc))
    return back_to("/ui/triggers")


@router.get("/queue")
def queue_page(request: Request, state: StateDep) -> Response:
    """The tenant's slots in use here (of the machine's), its running jobs with their
    slots, and its waiting jobs in the order they start, each with why it waits."""
    session = signed_in(request, state)
    if session is None:
        return to_login()
    tenant, store = session.tenant, state.store
    leases = [lease for lease in store.leases.held() if lease.tenant == tenant]
    waiting = store.queue.waiting(limit=QUEUE_SHOWN, tenant=tenant)
    total = sum(store.queue.waiting_by_priority(tenant).values())
    used, capacity = store.leases.used(tenant=tenant), state.config.capacity
    slots: dict[str, Any] = {"cpu": (used.cpu, capacity.cpu)}
    if capacity.gpu:  # a machine with no GPU shows no GPU slots
        slots["gpu"] = (used.gpu, capacity.gpu)
    running = [
        {"id": lease.round_of or lease.job_id, "round": lease.round_of is not None,
         "priority": lease.priority, "cpu": lease.cpu, "gpu": lease.gpu,
         "since": lease.acquired_at, "where": lease.owner}
        for lease in leases
    ]  # fmt: skip
    queued = [
        {"id": job.id, "priority": job.priority, "state": job.state.value,
         "why": job.wait_reason or "next to start"}
        for job in waiting
    ]  # fmt: skip
    limits = state.config.limits(tenant)
    return page(
        request, "queue.html", tenant=tenant, csrf=session_key(state).csrf(session),
        slots=slots, running=running, queued=queued, limits=limits.model_dump(),
        more=max(0, total - len(queued)),
    )  # fmt: skip
