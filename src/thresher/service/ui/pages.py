"""The dashboard's pages, served by `thresher serve` under `/ui`: what an on-call person
looks at — jobs live (state, progress, rows/s, ETA), a job's shards, bad records and
cancel, the schedules with their next fire times, pause and resume.

Server-rendered with Jinja2 (templates/) and one small script (static/app.js) that
refreshes the jobs table from `/ui/jobs.json` every two seconds: nothing to build, no
CDN, every asset in the installed package. Each page answers with a Content-Security-
Policy that allows no inline script and no other origin. A tenant signs in with its
token (`session.py`) and sees only its own objects: another tenant's job is a 404, as in
the API, whose functions the pages call.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from thresher.errors import SinkError
from thresher.service.downloads import job_error_parts, stream_errors
from thresher.service.errors import NotFound, ServiceError
from thresher.service.policies.auth import tenant_of
from thresher.service.policies.disclosure import private_roots
from thresher.service.routers import jobs as jobs_api
from thresher.service.state import ServiceState, StateDep
from thresher.service.ui.charts import charts_of
from thresher.service.ui.frame import SECURITY_HEADERS
from thresher.service.ui.frame import checked as _checked
from thresher.service.ui.frame import page as _page
from thresher.service.ui.frame import session_key as _key
from thresher.service.ui.frame import signed_in as _session
from thresher.service.ui.frame import to_login as _to_login
from thresher.service.ui.session import COOKIE, MAX_AGE
from thresher.service.ui.webhooks import job_deliveries

__all__ = ["SECURITY_HEADERS", "router"]

router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE = 50  # jobs a page
BAD_SHOWN = 20  # a job page's first bad records
STATES = ("queued", "running", "preempted", "succeeded", "failed", "cancelled", "held", "rejected")


@router.get("")
def home() -> Response:
    return RedirectResponse("/ui/jobs", status_code=303, headers=SECURITY_HEADERS)


@router.get("/login")
def login_page(request: Request) -> Response:
    return _page(request, "login.html")


@router.post("/login")
def login(request: Request, state: StateDep, token: Annotated[str, Form()] = "") -> Response:
    """A bearer token for a session cookie; a wrong one is the same page, 401."""
    tenant = tenant_of(state.store, token.strip()) if token.strip() else None
    if tenant is None:
        return _page(request, "login.html", 401, problem="That token is not one this server knows.")
    digest = hashlib.sha256(token.strip().encode()).hexdigest()
    response = RedirectResponse("/ui/jobs", status_code=303, headers=SECURITY_HEADERS)
    response.set_cookie(
        COOKIE, _key(state).seal(tenant, digest), max_age=MAX_AGE, httponly=True,
        samesite="strict", secure=request.url.scheme == "https", path="/ui",
    )  # fmt: skip
    return response


@router.post("/logout")
def logout(request: Request, state: StateDep, csrf: Annotated[str, Form()] = "") -> Response:
    response = _to_login()
    if _checked(request, state, csrf) is not None:
        response.delete_cookie(COOKIE, path="/ui")
    return response


def _job_rows(
    state: ServiceState, tenant: str, wanted: str | None, name: str, after: str | None = None
) -> list[dict[str, Any]]:
    """A page of the tenant's jobs (of `wanted` state and a name holding `name`), newest
    first, older than job `after` when given, as shown. The store filters: a tenant with
    10,000 jobs costs one indexed query and a page of rows."""
    cursor = None
    if after:
        try:
            cursor = jobs_api.tenant_job(state, tenant, after)
        except NotFound:
            cursor = None  # another tenant's id, or none: the first page
    ids = state.store.views.tenant_job_ids(tenant, PAGE, cursor, wanted, name)
    held = state.store.leases.held()
    return [_shown(jobs_api.describe(state, state.store.job(i), held)) for i in ids]


def _shown(info: Any) -> dict[str, Any]:
    """A job as a row of the table: progress, rows/s and an ETA from the measured rate."""
    row: dict[str, Any] = info.model_dump(mode="json")
    done, total = info.progress.shards_done, info.progress.shards_total
    row["percent"] = round(100 * done / total) if total else 0
    started = info.started_at or (info.created_at if info.status == "running" else None)
    rate, eta = info.rows_per_second, None
    if info.status == "running" and started:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(started)).total_seconds()
        rows = info.request_counts.total
        rate = rows / seconds if seconds > 0 and rows else None
        if done and total > done and seconds > 0:
            eta = round(seconds / done * (total - done))
    row["rate"], row["eta"] = (round(rate) if rate else None), eta
    row["duration"] = _duration(info.seconds, started if info.status == "running" else None)
    return row


def _duration(seconds: float | None, running_since: str | None) -> str:
    """How long the job ran (or has run so far), as 1h02m03s, 4m05s or 6s."""
    if running_since is not None:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(running_since)).total_seconds()
    if seconds is None:
        return ""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@router.get("/jobs")
def jobs_page(
    request: Request,
    state: StateDep,
    status: Annotated[str | None, Query()] = None,
    name: Annotated[str, Query(max_length=200)] = "",
    after: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    session = _session(request, state)
    if session is None:
        return _to_login()
    wanted = status if status in STATES else None
    rows = _job_rows(state, session.tenant, wanted, name, after)
    older = rows[-1]["id"] if len(rows) == PAGE else None
    return _page(
        request, "jobs.html", tenant=session.tenant, csrf=_key(state).csrf(session),
        jobs=rows, states=STATES, status=wanted or "", name=name, after=after, older=older,
    )  # fmt: skip


@router.get("/jobs.json")
def jobs_json(
    request: Request,
    state: StateDep,
    status: Annotated[str | None, Query()] = None,
    name: Annotated[str, Query(max_length=200)] = "",
    after: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    """The jobs table's rows, for the page's live refresh."""
    session = _session(request, state)
    if session is None:
        return JSONResponse({"detail": "sign in"}, status_code=401, headers=SECURITY_HEADERS)
    wanted = status if status in STATES else None
    rows = _job_rows(state, session.tenant, wanted, name, after)
    return JSONResponse({"data": rows}, headers=SECURITY_HEADERS)


@router.get("/jobs/{job_id}")
def job_page(job_id: str, request: Request, state: StateDep) -> Response:
    session = _session(request, state)
    if session is None:
        return _to_login()
    try:
        record = jobs_api.tenant_job(state, session.tenant, job_id)
    except NotFound:
        return _page(request, "missing.html", 404, tenant=session.tenant, what=f"job {job_id}")
    info = _shown(jobs_api.describe(state, record))
    tries: dict[int, list[dict[str, Any]]] = {}
    for attempt in state.store.views.attempts(job_id):
        tries.setdefault(attempt["index"], []).append(attempt)
    shards = [
        vars(s) | {"state": s.state.value, "tries": tries.get(s.index, [])}
        for s in state.store.shards(job_id)
    ]
    return _page(
        request, "job.html", tenant=session.tenant, csrf=_key(state).csrf(session), job=info,
        shards=shards, charts=charts_of(state, record), placement=_placement(record),
        deliveries=job_deliveries(state, job_id),
        resumable=record.state.value in ("failed", "cancelled")
        and info["slots"] is None,  # no coordinator, no retry round starting or ending
        # a finished job with bad rows, every shard done (`retry-errors`' own conditions)
        retriable=record.state.value in ("succeeded", "failed") and info["errors"] > 0
        and info["progress"]["shards_done"] == info["progress"]["shards_total"],
        spec=json.dumps(record.spec.model_dump(mode="json"), indent=2),
        manifest=json.dumps(record.manifest or {}, indent=2, default=str),
        bad=_first_bad(state, record) if record.state.finished else [],
    )  # fmt: skip


def _placement(record: Any) -> str | None:
    """Where the job ran: the manifest's placement (workers x threads, device)."""
    placement = (record.manifest or {}).get("placement")
    return None if placement is None else str(placement)


def _first_bad(state: ServiceState, record: Any) -> list[dict[str, Any]]:
    """The job's first bad records (file, line or row, stage, error, message)."""
    try:
        parts = job_error_parts(record.spec.sink, record.id)
    except SinkError:
        return []  # a table output whose catalog cannot be read now: none to show
    chunks = stream_errors(parts, "jsonl", private_roots(state))
    text = b"".join(itertools.islice(chunks, 4)).decode("utf-8", errors="replace")
    return [json.loads(line) for line in text.splitlines()[:BAD_SHOWN] if line.strip()]


@router.post("/jobs/{job_id}/cancel")
def cancel(
    job_id: str, request: Request, state: StateDep, csrf: Annotated[str, Form()] = ""
) -> Response:
    session = _checked(request, state, csrf)
    if session is None:
        return _page(request, "missing.html", 403, what="that action (sign in again)")
    try:
        jobs_api.cancel_job(job_id, state, session.tenant)
    except ServiceError:
        return _page(request, "missing.html", 404, tenant=session.tenant, what=f"job {job_id}")
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303, headers=SECURITY_HEADERS)


@router.post("/jobs/{job_id}/resume")
def resume(
    job_id: str, request: Request, state: StateDep, csrf: Annotated[str, Form()] = ""
) -> Response:
    return _job_action(jobs_api.resume_job, job_id, request, state, csrf)


@router.post("/jobs/{job_id}/retry-errors")
def retry_errors(
    job_id: str, request: Request, state: StateDep, csrf: Annotated[str, Form()] = ""
) -> Response:
    return _job_action(jobs_api.retry_job_errors, job_id, request, state, csrf)


def _job_action(
    act: Callable[[str, ServiceState, str], object],
    job_id: str,
    request: Request,
    state: ServiceState,
    csrf: str,
) -> Response:
    """A job page's button: the API's own route `act`, for the session's tenant; its
    refusal (409, 404) shown as a page."""
    session = _checked(request, state, csrf)
    if session is None:
        return _page(request, "missing.html", 403, what="that action (sign in again)")
    try:
        act(job_id, state, session.tenant)
    except ServiceError as exc:
        return _page(request, "missing.html", exc.status, tenant=session.tenant, what=str(exc))
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303, headers=SECURITY_HEADERS)


@router.post("/jobs/{job_id}/{decision}")
def decide(
    job_id: str,
    decision: Literal["approve", "reject"],
    request: Request,
    state: StateDep,
    csrf: Annotated[str, Form()] = "",
) -> Response:
    """A held job's Approve or Reject button: the API's own route, for the session's tenant."""
    session = _checked(request, state, csrf)
    if session is None:
        return _page(request, "missing.html", 403, what="that action (sign in again)")
    act = jobs_api.approve_job if decision == "approve" else jobs_api.reject_job
    try:
        act(job_id, state, session.tenant)
    except NotFound:
        return _page(request, "missing.html", 404, tenant=session.tenant, what=f"job {job_id}")
    except ServiceError:
        pass  # decided meanwhile (or not held): the page shows the job as it stands
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303, headers=SECURITY_HEADERS)


@router.get("/jobs/{job_id}/{what}")
def download(job_id: str, what: str, request: Request, state: StateDep) -> Response:
    """A job's results or bad records, downloaded with the session (the API's own)."""
    session = _session(request, state)
    if session is None:
        return _to_login()
    try:
        if what == "results":
            return jobs_api.get_results(job_id, state, session.tenant, None)
        if what == "errors":
            return jobs_api.get_errors(job_id, state, session.tenant, None)
    except ServiceError as exc:
        return _page(request, "missing.html", exc.status, tenant=session.tenant, what=str(exc))
    return _page(request, "missing.html", 404, tenant=session.tenant, what=what)
