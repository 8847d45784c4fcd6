"""`/v1/webhook_endpoints`: where a tenant's batch events go, as OpenAI's API has it, so
the official client's `webhooks.create/list/retrieve/update/delete/rotate_secret/test`
work unchanged and `webhooks.unwrap` checks what arrives
(`thresher.notify.endpoints` has the event and its signature).

An endpoint takes some of `batch.completed`, `batch.failed`, `batch.expired` and
`batch.cancelled` (the events this server sends); its URL passes the same policy as a
job's `notify.webhook`. The signing secret is shown when the endpoint is made and when
it is rotated, never again. Refusals are 400 in OpenAI's envelope; another tenant's
endpoint is 404.

A test (`POST …/{id}/test`) is one attempt within the server's `webhook_timeout`, and a
success only when the receiver answers 2xx (a redirect is not followed: its status is
reported, not a success). Tests wait on receivers the tenant chose, on the server's
request threads, so each tenant has a few test slots of its own (`TESTS_PER_TENANT`):
its own slow receiver can make only its own tests wait.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Annotated, Any

import httpx2 as httpx
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from thresher.notify.attempts import post_webhook, webhook_client
from thresher.notify.endpoints import (
    BATCH_EVENTS,
    new_endpoint_id,
    new_secret,
    sample_event,
    secret_hint,
    signed_headers,
)
from thresher.notify.shares import TenantShares
from thresher.notify.urls import check_webhook_url
from thresher.service.errors import BadRequest, NotFound, TooManyRequests
from thresher.service.openai.pages import cursor_page
from thresher.service.policies.auth import Tenant
from thresher.service.policies.quotas import over_limit
from thresher.service.state import ServiceState, StateDep
from thresher.store import EndpointRow

router = APIRouter(prefix="/v1/webhook_endpoints", tags=["webhooks"])

EVENTS = tuple(BATCH_EVENTS.values())
KEEP_OLD_SECRET = 24 * 3600
# Tests run on the server's request threads, each up to `webhook_timeout`: a tenant has
# this many at once, so its endpoints cannot take the threads other tenants' requests use.
TESTS_PER_TENANT = 2
_TESTS = TenantShares(TESTS_PER_TENANT)


class EndpointFields(BaseModel):
    """The body of `POST /v1/webhook_endpoints` (all three) and of an update (any)."""

    model_config = ConfigDict(extra="forbid")

    event_types: list[str] | None = Field(None, min_length=1, max_length=len(EVENTS))
    name: str | None = Field(None, min_length=1, max_length=256)
    url: str | None = Field(None, min_length=1, max_length=2048)


class Rotation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keep_old_secret_active_for_24_hours: bool = False


class TestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_type: str = Field(max_length=64)


def public(endpoint: EndpointRow, with_secret: bool = False) -> dict[str, Any]:
    """OpenAI's `webhook_endpoint` object (with its secret, once)."""
    shown = {
        "id": endpoint.id,
        "object": "webhook_endpoint",
        "created_at": endpoint.created_at,
        "updated_at": endpoint.updated_at,
        "name": endpoint.name,
        "url": endpoint.url,
        "event_types": endpoint.event_types,
        "signing_secret_hint": secret_hint(endpoint.secret),
    }
    return {**shown, "signing_secret": endpoint.secret} if with_secret else shown


def _checked(state: ServiceState, fields: EndpointFields) -> None:
    """BadRequest naming the first field this server cannot take."""
    unknown = [e for e in fields.event_types or () if e not in EVENTS]
    if unknown:
        raise BadRequest(
            f"event_types: this server sends {', '.join(EVENTS)}, not {', '.join(unknown)}"
        )
    if fields.url is not None:
        try:
            check_webhook_url(fields.url, state.config.webhook_allow_private)
        except ValueError as exc:
            raise BadRequest(f"url: {str(exc).split(': ', 1)[-1]}") from None


def tenant_endpoint(state: ServiceState, tenant: str, endpoint_id: str) -> EndpointRow:
    found = state.store.webhook_endpoints.find(endpoint_id, tenant)
    if found is None:
        raise NotFound(f"no webhook endpoint {endpoint_id!r}")
    return found


@router.post("", summary="Create a webhook endpoint")
def create_endpoint(fields: EndpointFields, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    missing = [n for n in ("event_types", "name", "url") if getattr(fields, n) is None]
    if missing:
        raise BadRequest(f"{missing[0]}: required")
    _checked(state, fields)
    created = int(time.time())
    assert fields.name is not None and fields.url is not None and fields.event_types
    endpoint = EndpointRow(
        new_endpoint_id(),
        tenant,
        fields.name,
        fields.url,
        sorted(set(fields.event_types), key=EVENTS.index),
        new_secret(),
        None,
        None,
        created,
        created,
    )
    limit = state.config.limits(tenant).webhook_endpoints
    if not state.store.webhook_endpoints.add(endpoint, limit):
        has = f"{limit:,} webhook endpoints"
        raise over_limit(tenant, "webhook_endpoints", limit, has, "delete one first")
    return public(endpoint, with_secret=True)


@router.get("", summary="List webhook endpoints, newest first")
def list_endpoints(
    state: StateDep,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[str | None, Query(max_length=64)] = None,
) -> dict[str, Any]:
    found = state.store.webhook_endpoints.of_tenant(tenant, limit + 1, after)
    return cursor_page([public(e) for e in found], limit)


@router.get("/{endpoint_id}", summary="A webhook endpoint")
def get_endpoint(endpoint_id: str, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    return public(tenant_endpoint(state, tenant, endpoint_id))


@router.post("/{endpoint_id}", summary="Change a webhook endpoint's name, URL or events")
def update_endpoint(
    endpoint_id: str, fields: EndpointFields, state: StateDep, tenant: Tenant
) -> dict[str, Any]:
    """Fields left out stay; `updated_at` moves only when something changed."""
    endpoint = tenant_endpoint(state, tenant, endpoint_id)
    _checked(state, fields)
    events = endpoint.event_types
    if fields.event_types is not None:
        events = sorted(set(fields.event_types), key=EVENTS.index)
    name, url = fields.name or endpoint.name, fields.url or endpoint.url
    changed = replace(endpoint, name=name, url=url, event_types=events)
    if changed != endpoint:
        changed = replace(changed, updated_at=int(time.time()))
        state.store.webhook_endpoints.save(changed, ("name", "url", "event_types"))
    return public(changed)


@router.delete("/{endpoint_id}", summary="Delete a webhook endpoint")
def delete_endpoint(endpoint_id: str, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    """Its pending deliveries are dropped at their next try."""
    tenant_endpoint(state, tenant, endpoint_id)
    state.store.webhook_endpoints.remove(endpoint_id, tenant)
    return {"id": endpoint_id, "object": "webhook_endpoint.deleted", "deleted": True}


@router.post("/{endpoint_id}/rotate_secret", summary="Give a webhook endpoint a new secret")
def rotate_secret(
    endpoint_id: str, state: StateDep, tenant: Tenant, rotation: Rotation | None = None
) -> dict[str, Any]:
    """The old secret stops signing now, or in 24 hours when asked to stay (deliveries
    meanwhile carry both signatures)."""
    endpoint = tenant_endpoint(state, tenant, endpoint_id)
    keep = rotation is not None and rotation.keep_old_secret_active_for_24_hours
    at = int(time.time())
    rotated = replace(
        endpoint,
        secret=new_secret(),
        old_secret=endpoint.secret if keep else None,
        old_secret_until=at + KEEP_OLD_SECRET if keep else None,
        updated_at=at,
    )
    state.store.webhook_endpoints.save(rotated, ("secret", "old_secret", "old_secret_until"))
    return public(rotated, with_secret=True)


@router.post("/{endpoint_id}/test", summary="Send a sample event to a webhook endpoint")
async def test_endpoint(
    endpoint_id: str, request: TestRequest, state: StateDep, tenant: Tenant
) -> dict[str, Any]:
    """One signed sample delivery (data.id `batch_test`), now, not retried; the status
    the receiver answered, a success only for a 2xx (400 when it cannot be reached or
    does not answer within `webhook_timeout`)."""
    endpoint = tenant_endpoint(state, tenant, endpoint_id)
    if request.event_type not in EVENTS:
        raise BadRequest(f"event_type: this server sends {', '.join(EVENTS)}")
    if not _TESTS.take(tenant):
        raise TooManyRequests(f"{TESTS_PER_TENANT} of your endpoint tests are under way", 5)
    try:
        status = await run_in_threadpool(_send_sample, state, endpoint, request.event_type)
    finally:
        _TESTS.give_back(tenant)
    return {
        "object": "webhook_endpoint.test",
        "webhook_endpoint_id": endpoint.id,
        "event_type": request.event_type,
        "status_code": status,
        "success": 200 <= status < 300,
    }


def _send_sample(state: ServiceState, endpoint: EndpointRow, event_type: str) -> int:
    now = time.time()
    event = sample_event(event_type, int(now))
    body = json.dumps(event).encode()
    signature = signed_headers(endpoint, event["id"], body, now)
    allow_private, deadline = state.config.webhook_allow_private, state.config.webhook_timeout
    with webhook_client() as client:
        try:
            return post_webhook(
                client, endpoint.url, body, signature, allow_private, deadline=deadline
            ).status
        except (ValueError, httpx.TransportError) as exc:
            raise BadRequest(f"url: the endpoint could not be reached: {exc}") from None
