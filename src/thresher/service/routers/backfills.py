"""Backfills of a tenant's schedules: `POST /v1/schedules/{name}/backfills` (from, to),
`GET /v1/schedules/{name}/backfills`, `GET /v1/backfills/{id}`, `POST
/v1/backfills/{id}/cancel`. Like triggering a tick by hand, a backfill is the tenant's
to make on its own schedules (a config schedule's is its operator's: `thresher backfill`,
409 here); any backfill of a schedule run for the tenant is readable. Another tenant's
backfill answers 404, as one that never was."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from thresher.schedules.backfills import BackfillError
from thresher.service.backfills import cancel_backfill, start_backfill, view_backfill
from thresher.service.errors import NotFound, Unprocessable
from thresher.service.policies.auth import Tenant
from thresher.service.routers.schedules import own_schedule, tenant_schedule
from thresher.service.state import ServiceState, StateDep
from thresher.store import BackfillRow

router = APIRouter(tags=["backfills"])


class BackfillRequest(BaseModel):
    """The body of `POST /v1/schedules/{name}/backfills`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    start: str = Field(
        alias="from",
        max_length=64,
        description="An ISO date or date-time on the schedule's wall clock: the first"
        " fire time covered (a date: from its start).",
    )
    end: str = Field(
        alias="to",
        max_length=64,
        description="An ISO date or date-time on the schedule's wall clock: the last fire"
        " time covered (a date: to its end). Not before `from`.",
    )
    max_running: int | None = Field(
        None, ge=1, le=1000, description="At most this many of its jobs wait or run at once."
    )


def _visible(state: ServiceState, tenant: str, backfill_id: str) -> BackfillRow:
    """The backfill `backfill_id` of a schedule run for `tenant`; NotFound otherwise."""
    row = state.store.backfills.find(backfill_id)
    if row is None or row.tenant != tenant:
        raise NotFound(f"no backfill {backfill_id!r}")
    return row


@router.post("/v1/schedules/{name}/backfills", status_code=201, summary="Backfill a schedule")
def create_backfill(
    name: str, request: BackfillRequest, state: StateDep, tenant: Tenant
) -> dict[str, Any]:
    """One job per fire time of the schedule in [from, to] that has none yet, below its
    live ticks' priority; fire times that already have a job are skipped, and say so. At
    most 1000 fire times, all in the past. Answers the backfill object; follow it with
    `GET /v1/backfills/{id}`."""
    schedule = own_schedule(state, tenant, name)
    try:
        view = start_backfill(
            state.store, schedule, (request.start, request.end), request.max_running
        )
    except BackfillError as exc:
        raise Unprocessable([str(exc)]) from None
    state.backfills_waiting.set()
    return view.as_json()


@router.get("/v1/schedules/{name}/backfills", summary="A schedule's backfills, newest first")
def list_backfills(
    name: str,
    state: StateDep,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    schedule = tenant_schedule(state, tenant, name)
    rows = state.store.backfills.of_schedule(schedule.key, limit)
    return {"object": "list", "data": [view_backfill(state.store, r).as_json() for r in rows]}


@router.get("/v1/backfills/{backfill_id}", summary="A backfill: its fire times and progress")
def get_backfill(backfill_id: str, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    return view_backfill(state.store, _visible(state, tenant, backfill_id)).as_json()


@router.post("/v1/backfills/{backfill_id}/cancel", summary="Cancel a backfill")
def cancel(backfill_id: str, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    """No more of its fire times start; its jobs still waiting are cancelled, a running
    one runs to its end. Cancelling an ended backfill changes nothing."""
    row = _visible(state, tenant, backfill_id)
    view = cancel_backfill(state.store, row)
    state.backfills_waiting.set()
    return view.as_json()
