"""The dashboard's webhook delivery logs: a job's deliveries on its page, the tenant's
webhook endpoints (batch events) with theirs, and "send the failed ones again" for each —
the API's own delivery log and redelivery (routers/deliveries.py), for the signed-in
tenant only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from thresher.service.errors import ServiceError
from thresher.service.routers import deliveries as deliveries_api
from thresher.service.routers import webhook_endpoints as endpoints_api
from thresher.service.state import ServiceState, StateDep
from thresher.service.ui.frame import back_to, checked, page, session_key, signed_in, to_login

router = APIRouter(prefix="/ui", include_in_schema=False)
SHOWN = 20  # an endpoint's newest deliveries


def job_deliveries(state: ServiceState, job_id: str) -> list[dict[str, Any]]:
    """A job's webhook deliveries (event, URL, state, tries, last answer), for its page."""
    return list(deliveries_api._listed(state.store.deliveries.of_job(job_id))["data"])


@router.get("/webhooks")
def webhooks_page(request: Request, state: StateDep) -> Response:
    session = signed_in(request, state)
    if session is None:
        return to_login()
    endpoints = endpoints_api.list_endpoints(state, session.tenant, 100, None)["data"]
    for endpoint in endpoints:
        found = deliveries_api.endpoint_deliveries(endpoint["id"], state, session.tenant)
        endpoint["deliveries"] = list(reversed(found["data"]))[:SHOWN]  # newest first
    return page(
        request, "webhooks.html", tenant=session.tenant, csrf=session_key(state).csrf(session),
        endpoints=endpoints,
    )  # fmt: skip


@router.post("/webhooks/{kind}/{subject}/redeliver")
def redeliver(
    kind: str, subject: str, request: Request, state: StateDep, csrf: Annotated[str, Form()] = ""
) -> Response:
    """Send a job's (`kind` jobs) or an endpoint's (`endpoints`) failed deliveries again."""
    session = checked(request, state, csrf)
    if session is None or kind not in ("jobs", "endpoints"):
        return page(request, "missing.html", 403, what="that action (sign in again)")
    try:
        if kind == "jobs":
            deliveries_api.redeliver_job(subject, state, session.tenant)
        else:
            deliveries_api.redeliver_endpoint(subject, state, session.tenant)
    except ServiceError as exc:
        return page(request, "missing.html", exc.status, tenant=session.tenant, what=str(exc))
    return back_to(f"/ui/jobs/{subject}" if kind == "jobs" else "/ui/webhooks")
