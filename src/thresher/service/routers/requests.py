"""HTTP for the request buffer: `POST /v1/requests` and `GET /v1/requests/{custom_id}`.

    POST /v1/requests
    {"custom_id": "order-1", "model": "churn", "input": {"age": 41, "plan": "pro"}}

takes one record, a list of them, or `{"model": "churn", "requests": [...]}` with the
model given once. It answers 202 with each record `waiting`; 409 when a custom_id was
used before by this tenant (nothing of that request is stored); 422 for an unknown model.

    GET /v1/requests/order-1

answers its `status` — `waiting`, `batched` (in a job: `job_id`), `done` (with `output`,
the prediction columns) or `failed` (with `error`: `stage`, `error`, `message`). A
custom_id of another tenant answers 404, as one never posted does.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, ConfigDict, Field

from thresher.service.errors import Conflict, NotFound, TooLarge, Unprocessable
from thresher.service.policies.auth import current_tenant
from thresher.service.policies.disclosure import public_message
from thresher.service.state import ServiceState, get_state
from thresher.store import BufferedRequest, DuplicateRequest

MAX_RECORDS_PER_POST = 10_000

router = APIRouter(tags=["requests"])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestRecord(_Strict):
    """One record to predict."""

    custom_id: str = Field(min_length=1, max_length=256, description="Unique per tenant.")
    model: str | None = Field(
        default=None, description="A registered model (or give it once, above)."
    )
    input: dict[str, Any] = Field(description="The model's input columns and their values.")


class RequestList(_Strict):
    """Records sharing one model."""

    model: str | None = None
    requests: list[RequestRecord] = Field(min_length=1)


class RequestStatus(BaseModel):
    """Where a buffered record stands, and its answer once it has one."""

    custom_id: str
    model: str
    status: str = Field(description="waiting, batched, done or failed")
    job_id: str | None = None
    created_at: str
    finished_at: str | None = None
    output: dict[str, Any] | None = Field(
        default=None, description="The prediction columns (done)."
    )
    error: dict[str, Any] | None = Field(
        default=None, description="stage, error, message (failed)."
    )


class Accepted(BaseModel):
    """The records buffered by one `POST /v1/requests`."""

    object: str = "list"
    data: list[RequestStatus]


@router.post("/v1/requests", status_code=202, response_model_exclude_none=True)
def add_requests(
    body: Annotated[RequestRecord | list[RequestRecord] | RequestList, Body()],
    state: Annotated[ServiceState, Depends(get_state)],
    tenant: Annotated[str, Depends(current_tenant)],
) -> Accepted:
    """Buffer one record or many; they run in the model's next batch job."""
    records = _records(state, body)
    try:
        created = state.store.requests.add(tenant, records)
    except DuplicateRequest as exc:
        shown = ", ".join(repr(c) for c in exc.custom_ids[:10])
        more = f" and {len(exc.custom_ids) - 10} more" if len(exc.custom_ids) > 10 else ""
        raise Conflict(
            f"custom_id already used: {shown}{more}; a custom_id is buffered once per tenant "
            "(GET /v1/requests/{custom_id} shows the first); nothing of this request was stored"
        ) from None
    return Accepted(
        data=[
            RequestStatus(custom_id=custom_id, model=model, status="waiting", created_at=created)
            for custom_id, model, _ in records
        ]
    )


@router.get(
    "/v1/requests/{custom_id:path}",
    response_model=RequestStatus,
    response_model_exclude_none=True,
)
def get_request(
    custom_id: str,
    state: Annotated[ServiceState, Depends(get_state)],
    tenant: Annotated[str, Depends(current_tenant)],
) -> RequestStatus:
    """A buffered record's status, and its prediction or error once its job has ended."""
    found = state.store.requests.get(tenant, custom_id)
    if found is None:
        raise NotFound(f"no request {custom_id!r}; POST /v1/requests buffers one")
    return _status(state, found)


def _records(
    state: ServiceState, body: RequestRecord | list[RequestRecord] | RequestList
) -> list[tuple[str, str, dict[str, Any]]]:
    """`(custom_id, model, input)` per record, each checked; Unprocessable names each
    problem by its place in the body."""
    default, items = (body.model, body.requests) if isinstance(body, RequestList) else (None, body)
    listed = items if isinstance(items, list) else [items]
    if len(listed) > MAX_RECORDS_PER_POST:
        raise TooLarge(f"{len(listed)} records in one request; send at most {MAX_RECORDS_PER_POST}")
    records, problems = [], []
    known = state.config.models
    for index, record in enumerate(listed):
        where = f"requests[{index}]" if isinstance(body, (list, RequestList)) else "request"
        model = record.model or default
        if model is None:
            problems.append(f"{where}.model: required (on the record or once at the top level)")
        elif model not in known:
            names = ", ".join(sorted(known)) or "none"
            problems.append(f"{where}.model: no model named {model!r} (registered: {names})")
        if "custom_id" in record.input:
            problems.append(f"{where}.input.custom_id: custom_id is the id column, not an input")
        records.append((record.custom_id, model or "", record.input))
    if problems:
        raise Unprocessable(problems)
    return records


def _status(state: ServiceState, found: BufferedRequest) -> RequestStatus:
    return RequestStatus(
        custom_id=found.custom_id,
        model=found.model,
        status=found.state.value,
        job_id=found.job_id,
        created_at=found.created_at,
        finished_at=found.finished_at,
        output=found.result,
        error=_public_error(state, found.error),
    )


def _public_error(state: ServiceState, error: dict[str, Any] | None) -> dict[str, Any] | None:
    """A record's error with no server path in its message (the job's, or its bad row's)."""
    if error is None or not isinstance(error.get("message"), str):
        return error
    return {**error, "message": public_message(state, error["message"])}
