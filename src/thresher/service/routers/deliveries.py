"""`/v1/jobs/{id}/webhooks` and `/v1/webhook_endpoints/{id}/deliveries`: the delivery log
of a job's webhooks and of an endpoint's batch events (each delivery's event, URL,
state, tries, last answer, when it was made and delivered), and `redeliver`, which sends
the failed ones again with a new retry window (a receiver that was down longer than the
window, or fixed after answering 4xx). A tenant sees only its own jobs and endpoints."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from thresher.service.errors import Conflict
from thresher.service.policies.auth import Tenant
from thresher.service.routers.jobs import tenant_job
from thresher.service.routers.webhook_endpoints import tenant_endpoint
from thresher.service.state import ServiceState, StateDep

router = APIRouter(prefix="/v1", tags=["webhooks"])

SHOWN = ("event", "url", "state", "attempts", "last_status", "last_error", "created_at")


def _listed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    data = [{k: row[k] for k in (*SHOWN, "delivered_at")} for row in rows]
    return {"object": "list", "data": data}


def _redeliver(state: ServiceState, subjects: list[str]) -> dict[str, int]:
    if state.redeliver is None:
        raise Conflict("this server sends no webhooks now (it is starting or stopping)")
    return {"redelivering": state.redeliver(subjects)}


@router.get("/jobs/{job_id}/webhooks", summary="A job's webhook deliveries")
def job_webhooks(job_id: str, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    tenant_job(state, tenant, job_id)
    return _listed(state.store.deliveries.of_job(job_id))


@router.post("/jobs/{job_id}/webhooks/redeliver", summary="Send a job's failed webhooks again")
def redeliver_job(job_id: str, state: StateDep, tenant: Tenant) -> dict[str, int]:
    tenant_job(state, tenant, job_id)
    return _redeliver(state, [job_id])


@router.get("/webhook_endpoints/{endpoint_id}/deliveries", summary="An endpoint's deliveries")
def endpoint_deliveries(endpoint_id: str, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    tenant_endpoint(state, tenant, endpoint_id)
    rows = state.store.deliveries.of_endpoint(endpoint_id)
    listed = _listed(rows)
    for shown, row in zip(listed["data"], rows, strict=True):
        shown["batch_id"] = row["subject"].split("/", 1)[1]
    return listed


@router.post(
    "/webhook_endpoints/{endpoint_id}/deliveries/redeliver",
    summary="Send an endpoint's failed deliveries again",
)
def redeliver_endpoint(endpoint_id: str, state: StateDep, tenant: Tenant) -> dict[str, int]:
    tenant_endpoint(state, tenant, endpoint_id)
    subjects = sorted({r["subject"] for r in state.store.deliveries.of_endpoint(endpoint_id)})
    return _redeliver(state, subjects)
