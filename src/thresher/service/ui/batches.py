"""The dashboard's batches (OpenAI's Batch API, served by thresher) and files: each
batch's status, its request counts, the timeline of its status changes, and its output
and error files; the tenant's uploads and batch files, each to download — the API's own
objects, for the signed-in tenant only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from thresher.service.errors import ServiceError
from thresher.service.routers import batches as batches_api
from thresher.service.routers import files as files_api
from thresher.service.state import StateDep
from thresher.service.ui.frame import page, session_key, signed_in, to_login

router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE = 50  # batches a page
# A batch's status changes, in the order they happen (OpenAI's fields, Unix seconds).
TIMELINE = (
    ("created", "created_at"),
    ("in progress", "in_progress_at"),
    ("finalizing", "finalizing_at"),
    ("completed", "completed_at"),
    ("failed", "failed_at"),
    ("cancelling", "cancelling_at"),
    ("cancelled", "cancelled_at"),
    ("expired", "expired_at"),
)


def _when(seconds: int | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()[:19]


def _shown(batch: dict[str, Any]) -> dict[str, Any]:
    """The API's batch object, with its timeline in readable UTC times."""
    timeline = [(what, _when(batch[key])) for what, key in TIMELINE if batch.get(key)]
    return {**batch, "timeline": timeline, "created": _when(batch["created_at"])}


@router.get("/batches")
def batches_page(
    request: Request,
    state: StateDep,
    after: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    session = signed_in(request, state)
    if session is None:
        return to_login()
    found = batches_api.list_batches(state, session.tenant, PAGE, after)
    batches = [_shown(b) for b in found["data"]]
    older = found["last_id"] if found.get("has_more") else None
    return page(
        request, "batches.html", tenant=session.tenant, csrf=session_key(state).csrf(session),
        batches=batches, after=after, older=older,
    )  # fmt: skip


@router.get("/batches/{batch_id}")
def batch_page(batch_id: str, request: Request, state: StateDep) -> Response:
    session = signed_in(request, state)
    if session is None:
        return to_login()
    csrf = session_key(state).csrf(session)
    try:
        batch = batches_api.get_batch(batch_id, state, session.tenant)
    except ServiceError:
        return page(request, "missing.html", 404, tenant=session.tenant, what=f"batch {batch_id}")
    return page(request, "batch.html", tenant=session.tenant, csrf=csrf, batch=_shown(batch))


@router.get("/files")
def files_page(
    request: Request,
    state: StateDep,
    after: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    session = signed_in(request, state)
    if session is None:
        return to_login()
    found = files_api.list_files(state, session.tenant, limit=PAGE, after=after)
    files = [f.model_dump() | {"created": _when(f.created_at)} for f in found.data]
    older = found.last_id if found.has_more else None
    return page(
        request, "files.html", tenant=session.tenant, csrf=session_key(state).csrf(session),
        files=files, after=after, older=older,
    )  # fmt: skip


@router.get("/files/{file_id}")
def download_file(file_id: str, request: Request, state: StateDep) -> Response:
    """A batch's output or error file (any of the tenant's files), with the session."""
    session = signed_in(request, state)
    if session is None:
        return to_login()
    try:
        return files_api.file_content(file_id, state, session.tenant)
    except ServiceError as exc:
        return page(request, "missing.html", exc.status, tenant=session.tenant, what=str(exc))
