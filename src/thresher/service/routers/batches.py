"""`/v1/batches`: OpenAI's Batch API, self-hosted. The official `openai` client, with only
`base_url` changed, creates, reads, lists and cancels batches here; each is a thresher
job over the request lines of a `purpose = "batch"` file (`background/batches.py`).

Refused parameters are 400 in OpenAI's error envelope (never 409: the client retries
it); another tenant's batch is 404, as one that never was.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from thresher.openai.lines import ENDPOINTS
from thresher.service.downloads import output_of
from thresher.service.errors import BadRequest, NotFound
from thresher.service.limits import PRIORITY_LIMIT
from thresher.service.openai.pages import cursor_page
from thresher.service.policies.auth import Tenant
from thresher.service.policies.quotas import over_limit
from thresher.service.state import ServiceState, StateDep
from thresher.service.uploads import find_file
from thresher.sinks.openai_answers import partial_lines
from thresher.store import AtLimit, BatchRow, BatchStatus

router = APIRouter(prefix="/v1/batches", tags=["batches"])

WINDOW = re.compile(r"^(\d+)([smhd])$")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
BATCH_RETRY = 30  # seconds: Retry-After for a tenant at batches_in_flight


class BatchRequest(BaseModel):
    """The body of `POST /v1/batches`."""

    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(max_length=64)
    endpoint: str = Field(max_length=64)
    completion_window: str = Field(max_length=16)
    metadata: dict[str, str] | None = Field(None, max_length=16)
    # thresher's own (the client's `extra_body`): the priority of the batch's job.
    priority: int = Field(0, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)


def new_batch_id() -> str:
    """`batch_` and a sortable time, then random hex: newest sorts last."""
    return f"batch_{datetime.now(UTC):%Y%m%d%H%M%S%f}{secrets.token_hex(4)}"


def public(batch: BatchRow) -> dict[str, Any]:
    """OpenAI's batch object, and thresher's `priority` beside it."""
    counts = batch.counts or {"total": 0, "completed": 0, "failed": 0}
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "model": batch.model,
        "errors": batch.errors,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": batch.status.value,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": batch.created_at,
        "in_progress_at": batch.in_progress_at,
        "expires_at": batch.expires_at,
        "finalizing_at": batch.finalizing_at,
        "completed_at": batch.completed_at,
        "failed_at": batch.failed_at,
        "expired_at": batch.expired_at,
        "cancelling_at": batch.cancelling_at,
        "cancelled_at": batch.cancelled_at,
        "request_counts": counts,
        "usage": batch.usage,
        "metadata": batch.metadata,
        "priority": batch.priority,
    }


def _checked(state: ServiceState, tenant: str, request: BatchRequest) -> int:
    """The batch's window in seconds, once its parameters pass; BadRequest names the one
    that does not."""
    if request.endpoint not in ENDPOINTS:
        raise BadRequest(
            f"endpoint: this server runs batches for {', '.join(ENDPOINTS)},"
            f" not {request.endpoint!r}"
        )
    windows = state.config.batch_completion_windows
    matched = WINDOW.match(request.completion_window)
    if request.completion_window not in windows or matched is None:
        raise BadRequest(f"completion_window: this server accepts {', '.join(windows)}")
    highest = state.config.limits(tenant).max_priority
    if highest is not None and request.priority > highest:
        raise BadRequest(f"priority: tenant {tenant}'s batches run at priority {highest} or lower")
    for key, value in (request.metadata or {}).items():
        if len(key) > 64 or len(value) > 512:
            raise BadRequest("metadata: keys are at most 64 characters, values at most 512")
    upload = find_file(state.store, tenant, request.input_file_id)
    if upload.purpose != "batch":
        raise BadRequest(
            f"input_file_id: file {upload.id} was uploaded with purpose {upload.purpose!r},"
            " not 'batch'"
        )
    return int(matched.group(1)) * SECONDS[matched.group(2)]


@router.post("", summary="Create a batch")
def create_batch(request: BatchRequest, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    window = _checked(state, tenant, request)
    created = int(time.time())
    batch = BatchRow(
        id=new_batch_id(),
        tenant=tenant,
        input_file_id=request.input_file_id,
        endpoint=request.endpoint,
        completion_window=request.completion_window,
        status=BatchStatus.VALIDATING,
        created_at=created,
        expires_at=created + window,
        metadata=request.metadata,
        priority=request.priority,
    )
    limit = state.config.limits(tenant).batches_in_flight
    try:
        state.store.batches.create(batch, limit)
    except AtLimit as exc:
        has = f"{exc.used:,} batches not yet ended"
        then = "create it once one has ended"
        raise over_limit(
            tenant, "batches_in_flight", limit, has, then, retry_after=BATCH_RETRY
        ) from None
    state.batches_waiting.set()
    return public(batch)


def _tenant_batch(state: ServiceState, tenant: str, batch_id: str) -> BatchRow:
    found = state.store.batches.find(batch_id, tenant)
    if found is None:
        raise NotFound(f"no batch {batch_id!r}")
    return found


@router.get("/{batch_id}", summary="A batch")
def get_batch(batch_id: str, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    return public(_tenant_batch(state, tenant, batch_id))


@router.get("", summary="List batches, newest first")
def list_batches(
    state: StateDep,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[str | None, Query(max_length=64)] = None,
) -> dict[str, Any]:
    found = state.store.batches.of_tenant(tenant, limit + 1, after)
    return cursor_page([public(b) for b in found], limit)


@router.post("/{batch_id}/cancel", summary="Cancel a batch")
def cancel_batch(batch_id: str, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    """Requests already answered stay in the output file; the rest go to the error file
    as `batch_cancelled`. A finished batch is left as it is."""
    batch = _tenant_batch(state, tenant, batch_id)
    table = state.store.batches
    if batch.status == BatchStatus.VALIDATING:
        if table.move(batch.id, BatchStatus.VALIDATING, BatchStatus.CANCELLED):
            state.batch_ended(batch.id)
        else:  # its lines passed meanwhile: it is in progress now, with a job to stop
            batch = _tenant_batch(state, tenant, batch_id)
    if batch.status == BatchStatus.IN_PROGRESS:
        table.move(batch.id, BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING)
        if batch.job_id is not None:
            state.store.request_cancel(batch.job_id)
    state.batches_waiting.set()
    return public(_tenant_batch(state, tenant, batch_id))


@router.get("/{batch_id}/partial", summary="The answers so far (thresher's own)")
def partial_output(batch_id: str, state: StateDep, tenant: Tenant) -> StreamingResponse:
    """While a batch runs, the output file's lines of the requests answered so far (its
    committed shards), as JSONL; beyond OpenAI, which gives results only at the end."""
    return _partial(state, _tenant_batch(state, tenant, batch_id), errors=False)


@router.get("/{batch_id}/partial/errors", summary="The failed requests so far")
def partial_errors(batch_id: str, state: StateDep, tenant: Tenant) -> StreamingResponse:
    """The error file's lines of the requests that failed so far (their shards committed)."""
    return _partial(state, _tenant_batch(state, tenant, batch_id), errors=True)


def _partial(state: ServiceState, batch: BatchRow, errors: bool) -> StreamingResponse:
    lines: Iterator[str] = iter(())
    if batch.job_id is not None:
        section = state.store.job(batch.job_id).spec.sink
        sink = output_of(section)
        names = (batch.id, batch.model or "", batch.endpoint)
        parts = sink.committed_parts(batch.job_id)
        lines = partial_lines(parts, sink.file_format, names, errors)
    chunks = (line.encode("utf-8") for line in lines)
    return StreamingResponse(chunks, media_type="application/x-ndjson")
