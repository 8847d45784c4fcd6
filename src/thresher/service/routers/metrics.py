"""`/metrics` in Prometheus' text format, and `/healthz`.

`/metrics` (`service/metrics.py`, through prometheus-client) shows jobs by tenant and
state, rows read, written and rejected, the rate of each running job (labelled `job_id`
and `tenant`), how long shards ran, each schedule's ticks by outcome, the files each
trigger has taken, waiting jobs by priority, and this host's worker and GPU slots in use
(and free, the webhook backlog, HTTP request durations and the process's own figures for
the whole host's view only: they tell every tenant's use).

What it covers depends on who asks: a tenant's token shows that tenant's jobs alone (no
other tenant's job ids or volumes); a token of a tenant in `metrics_operators` shows every
job in the store, for the operator's Prometheus; and with `metrics_public = true` every
job is shown to anyone, with no token.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

from thresher.service.metrics import render
from thresher.service.policies.auth import Credentials, authenticate
from thresher.service.state import ServiceState, StateDep

log = logging.getLogger("thresher.service.routers.metrics")

router = APIRouter(tags=["operations"])

CONTENT_TYPE = CONTENT_TYPE_LATEST


@router.get(
    "/healthz",
    summary="Liveness: the server answers, its store is readable, its loops are running",
    response_model=None,
)
def healthz(state: StateDep, loops: bool = False) -> dict[str, Any] | JSONResponse:
    """`{"status": "ok"}` (200) while the store answers a query and every background loop
    (`thresher.loops`: the ticker, watcher, batch worker, request buffer, scheduler,
    heartbeat) ended its last pass well. `{"status": "degraded", "loops": {...}}` (still
    200: the server serves, and its supervisor is restarting the loop; a restart of the
    process would not mend what a loop keeps failing on) when a loop's last pass failed
    or one has hung, each loop with its `last_success`, `failures` in a row, `restarts`
    and `last_error`; a monitor alerts on the status. `?loops=true` adds the loops to an
    ok answer too. 503 `{"status": "unavailable"}` when the store does not answer."""
    try:
        state.store.db.query("SELECT 1")  # the one query a store of any kind answers
    except Exception:
        log.exception("/healthz: the store does not answer")
        return JSONResponse({"status": "unavailable"}, status_code=503)
    if state.loops.degraded():
        return {"status": "degraded", "loops": state.loops.report()}
    return {"status": "ok", "loops": state.loops.report()} if loops else {"status": "ok"}


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=PlainTextResponse,
    description="Jobs by state, row totals and running jobs' rows/s: the caller's own jobs, "
    "or every tenant's for a token of one of the server's `metrics_operators`. Needs a "
    "bearer token unless the server's `metrics_public` is true.",
)
def metrics(
    credentials: Credentials,
    state: StateDep,
) -> PlainTextResponse:
    """The metrics text, for Prometheus to scrape."""
    return PlainTextResponse(render(state, _scope(credentials, state)), media_type=CONTENT_TYPE)


def _scope(credentials: Credentials, state: ServiceState) -> str | None:
    """The tenant whose jobs the caller may see, or None for every tenant's."""
    if state.config.metrics_public:
        return None
    tenant = authenticate(credentials, state)
    return None if tenant in state.config.metrics_operators else tenant
