"""Limits on what a tenant creates (`[tenant_defaults]`, `[tenants.NAME]`), through the
whole HTTP app in this process (FastAPI's TestClient): a tenant at a limit gets 429
naming the limit and its value, another tenant is not affected, and `[tenants.NAME]`
overrides a default for one tenant. Tenants' listings are read by tenant, and `/metrics`
shows a plain tenant its own slot use alone."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from httpx2 import Response
from test_service_http import Api, make_api, metric

from thresher.service.schedules import every_schedule
from thresher.service.triggers import every_trigger
from thresher.store import SlotRequest, Slots
from thresher.triggers.settings import TriggerSettings

pytestmark = pytest.mark.unit

TIGHT = {
    "schedules": 2,
    "triggers": 2,
    "webhook_endpoints": 2,
    "batches_in_flight": 2,
    "stored_bytes": 1000,
}
BATCH_LINE = {
    "custom_id": "r1",
    "method": "POST",
    "url": "/v1/embeddings",
    "body": {"model": "double", "input": "hello"},
}


@pytest.fixture
def api(tmp_path: Any) -> Iterator[Api]:
    made = make_api(
        tmp_path,
        tenant_defaults=TIGHT,
        tenants={"globex": {"schedules": 3}},
        webhook_allow_private=True,
    )
    (made.shared / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n')
    with made.client:
        yield made


def make_schedule(api: Api, tenant: str, n: int) -> Response:
    job = {"model": "double", "source": {"uri": str(api.shared / "in.jsonl")}}
    body = {"name": f"s{n}", "cron": "0 * * * *", "job": job}
    return api.client.post("/v1/schedules", json=body, headers=api.auth(tenant))


def make_trigger(api: Api, tenant: str, n: int, **fields: Any) -> Response:
    body = {"name": f"t{n}", "watch": str(api.shared), "pattern": "*.csv", **fields}
    body.setdefault("job", {"model": "double"})
    return api.client.post("/v1/triggers", json=body, headers=api.auth(tenant))


def make_endpoint(api: Api, tenant: str, n: int) -> Response:
    body = {"name": f"e{n}", "url": "http://127.0.0.1:9/hook", "event_types": ["batch.completed"]}
    return api.client.post("/v1/webhook_endpoints", json=body, headers=api.auth(tenant))


def make_batch(api: Api, tenant: str, n: int) -> Response:
    line = (json.dumps({**BATCH_LINE, "custom_id": f"r{n}"}) + "\n").encode()
    uploaded = api.client.post(
        "/v1/files",
        files={"file": ("b.jsonl", line)},
        data={"purpose": "batch"},
        headers=api.auth(tenant),
    )
    assert uploaded.status_code == 201, uploaded.text
    body = {
        "input_file_id": uploaded.json()["id"],
        "endpoint": "/v1/embeddings",
        "completion_window": "24h",
    }
    return api.client.post("/v1/batches", json=body, headers=api.auth(tenant))


def make_upload(api: Api, tenant: str, n: int) -> Response:
    data = b'{"id": 1, "x": 1.0}\n' * 20  # 400 bytes: the third passes 1,000
    return api.client.post(
        "/v1/files", files={"file": (f"in{n}.jsonl", data)}, headers=api.auth(tenant)
    )


MAKERS: dict[str, tuple[Callable[[Api, str, int], Response], str]] = {
    "schedules": (make_schedule, "schedules = 2"),
    "triggers": (make_trigger, "triggers = 2"),
    "webhook_endpoints": (make_endpoint, "webhook_endpoints = 2"),
    "batches_in_flight": (make_batch, "batches_in_flight = 2"),
    "stored_bytes": (make_upload, "stored_bytes = 1,000"),
}


def message(response: Response) -> str:
    body = response.json()
    detail = body.get("detail") or body.get("error", {}).get("message")
    return str(detail)


@pytest.mark.parametrize("limit", sorted(MAKERS))
def test_a_tenant_at_a_limit_gets_429_naming_it_and_others_go_on(api: Api, limit: str) -> None:
    make, named = MAKERS[limit]
    for n in range(2):
        made = make(api, "acme", n)
        assert made.status_code in (200, 201), made.text
    refused = make(api, "acme", 2)
    assert refused.status_code == 429, refused.text
    assert named in message(refused)
    other = make(api, "ops", 0)  # another tenant's count is its own
    assert other.status_code in (200, 201), other.text


def test_a_tenants_own_section_overrides_a_default(api: Api) -> None:
    for n in range(3):
        made = make_schedule(api, "globex", n)
        assert made.status_code == 201, made.text
    refused = make_schedule(api, "globex", 3)
    assert refused.status_code == 429 and "schedules = 3" in message(refused)
    made = make_trigger(api, "globex", 0)  # the defaults it does not override still hold
    assert made.status_code == 201, made.text


def test_a_trigger_polling_faster_than_the_minimum_is_refused_naming_it(api: Api) -> None:
    refused = make_trigger(api, "acme", 0, poll_seconds=0.05)
    assert refused.status_code == 429, refused.text
    assert "trigger_min_poll_seconds = 1" in message(refused)
    made = make_trigger(api, "acme", 0, poll_seconds=1)
    assert made.status_code == 201, made.text
    changed = api.client.patch(
        "/v1/triggers/t0", json={"poll_seconds": 0.1}, headers=api.auth("acme")
    )
    assert changed.status_code == 429 and "trigger_min_poll_seconds" in message(changed)


def test_metrics_show_a_plain_tenant_its_own_slots_only(tmp_path: Any) -> None:
    api = make_api(tmp_path, metrics_operators=["ops"], capacity={"cpu": 8, "gpu": 0})
    for job_id, tenant, cpu in (("j1", "globex", 3), ("j2", "acme", 1)):
        grant = api.state.store.leases.acquire(SlotRequest(job_id, tenant, 0, cpu), Slots(8, 0))
        assert grant.granted, grant.reason
    with api.client:
        acme = api.client.get("/metrics", headers=api.auth("acme")).text
        ops = api.client.get("/metrics", headers=api.auth("ops")).text
    assert metric(acme, "thresher_cpu_slots_used") == 1
    assert "slots_free" not in acme  # the capacity less the host's use tells the host's use
    assert metric(ops, "thresher_cpu_slots_used") == 4
    assert metric(ops, "thresher_cpu_slots_free") == 4


def test_a_tenants_listing_reads_its_own_rows_alone(api: Api) -> None:
    """Another tenant's rows are not even parsed: one that cannot be read is never met."""
    assert make_schedule(api, "globex", 0).status_code == 201
    assert make_trigger(api, "globex", 0).status_code == 201
    assert make_schedule(api, "acme", 0).status_code == 201
    db = api.state.store.db
    with db.transaction() as cur:  # globex's rows spoilt behind the store's back
        cur.execute("UPDATE thresher_schedules SET settings = '{' WHERE tenant = 'globex'")
        cur.execute("UPDATE thresher_trigger_defs SET settings = '{' WHERE tenant = 'globex'")
    met: list[str] = []
    config, store = api.state.config, api.state.store
    mine = every_schedule(config, store, lambda row, _: met.append(row.key), tenant="acme")
    assert [s.key for s in mine] == ["acme/s0"]
    assert every_trigger(config, store, lambda row, _: met.append(row.key), tenant="acme") == []
    assert met == []
    every_schedule(config, store, lambda row, _: met.append(row.key))  # the loops' view
    every_trigger(config, store, lambda row, _: met.append(row.key))
    assert met == ["globex/s0", "globex/t0"]
    plan = db.query(
        "EXPLAIN QUERY PLAN SELECT key FROM thresher_trigger_defs WHERE tenant = ?", ("acme",)
    )
    assert "thresher_trigger_defs_tenant" in str(plan)


def test_a_trigger_stored_under_a_lower_limit_polls_at_the_limit(api: Api) -> None:
    """One made before the limit (or under a lower one) is slowed to it, not left at
    20 looks a second."""
    body = {"watch": str(api.shared), "job": {"model": "double"}, "poll_seconds": 0.05}
    settings = TriggerSettings.model_validate({**body, "tenant": "acme"})
    api.state.store.trigger_defs.create("acme", "old", settings.model_dump_json(), False)
    (found,) = every_trigger(api.state.config, api.state.store, tenant="acme")
    assert found.settings.poll_seconds == 1.0


def test_a_token_past_its_requests_per_second_gets_429_with_retry_after(tmp_path: Any) -> None:
    api = make_api(tmp_path, tenant_defaults={"requests_per_second": 0.5, "requests_burst": 2})
    with api.client:
        answers = [api.client.get("/v1/jobs", headers=api.auth("acme")) for _ in range(3)]
        other = api.client.get("/v1/jobs", headers=api.auth("globex"))
    assert [a.status_code for a in answers] == [200, 200, 429]
    refused = answers[-1]
    assert refused.headers["Retry-After"] == "2"  # one request is earned in 2 s
    assert "requests_per_second" in refused.json()["detail"]
    assert other.status_code == 200  # another token's bucket is its own


def test_a_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    from thresher.service.errors import TooManyRequests
    from thresher.service.policies.rates import RequestRates

    rates = RequestRates()
    for _ in range(3):
        rates.take("k", 10.0, 3, now=100.0)
    with pytest.raises(TooManyRequests):
        rates.take("k", 10.0, 3, now=100.0)
    rates.take("k", 10.0, 3, now=100.25)  # a quarter second at 10 a second: two more
    rates.take("k", 10.0, 3, now=100.25)
    with pytest.raises(TooManyRequests):
        rates.take("k", 10.0, 3, now=100.25)
    for _ in range(3):  # an hour idle fills no more than the burst
        rates.take("k", 10.0, 3, now=3700.0)
    with pytest.raises(TooManyRequests):
        rates.take("k", 10.0, 3, now=3700.0)
