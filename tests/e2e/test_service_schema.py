"""Schemathesis drives a running `thresher serve` from its own OpenAPI document: requests
generated for every operation, valid and not, with a tenant's token. No request may make
a server error (5xx), whatever it holds.

Brief in CI (`THRESHER_SCHEMA_EXAMPLES`, default 20 per operation); raise it for a longer
run: `THRESHER_SCHEMA_EXAMPLES=500 pytest tests/e2e/test_service_schema.py`.

Random path parameters and bodies mostly meet a 404 or a 422 at the door. So that the
routes of what a tenant makes — schedules (and their backfills), triggers, a job's
actuals, webhook endpoints — are driven past it, the tenant first makes one of each
(`SEEDS`), and half the generated requests to those routes name it, with a body that is
a good one but for one generated field: every field's validation is reached with the
others valid.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLES = int(os.environ.get("THRESHER_SCHEMA_EXAMPLES", "20"))


@dataclass(frozen=True)
class Api:
    server: Server
    token: str
    known: dict[str, str]  # path parameter: the seeded object's name or id
    bodies: dict[str, dict[str, Any]]  # path prefix: a good body for its POST/PATCH


def seed(server: Server, token: str, shared: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """One schedule, trigger, webhook endpoint and finished job of the tenant's, made
    through the API; the names and ids to put in paths, and a good body per route."""
    data = str(shared / "in.jsonl")
    job = {"model": "double", "source": {"uri": data}, "id_column": "id"}
    past = (datetime.now(UTC) - timedelta(days=3)).date().isoformat()
    bodies: dict[str, dict[str, Any]] = {
        "/v1/schedules/{name}/backfills": {"from": past, "to": past, "max_running": 1},
        "/v1/schedules": {"name": "nightly", "cron": "0 2 * * *", "timezone": "UTC", "job": job},
        "/v1/triggers": {"name": "inbox", "watch": str(shared), "pattern": "*.csv",
                         "job": {"model": "double"}},
        "/v1/webhook_endpoints": {"url": "http://127.0.0.1:9/hook", "name": "hook",
                                  "event_types": ["batch.completed"]},
        "/v1/jobs": job,
        "actuals": {"records": [{"id": 1, "label": 1.0}]},
    }  # fmt: skip
    with server.client(token) as client:
        for path in ("/v1/schedules", "/v1/triggers", "/v1/webhook_endpoints", "/v1/jobs"):
            made = client.post(path, json=bodies[path])
            assert made.status_code in (200, 201), (path, made.text)
            if path == "/v1/webhook_endpoints":
                endpoint_id = made.json()["id"]
            if path == "/v1/jobs":
                job_id = wait_for_job(client, made.json()["id"])["id"]
    known = {"name": "", "endpoint_id": endpoint_id, "job_id": job_id}
    return known, bodies


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    site = ServiceSite(tmp_path_factory.mktemp("schema"), settings="webhook_allow_private = true")
    token = site.token("acme")
    (site.shared / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n', encoding="utf-8")
    server = Server(site)
    try:
        known, bodies = seed(server, token, site.shared)
        yield Api(server, token, known, bodies)
    finally:
        server.stop()


def aimed(api: Api, case: schemathesis.Case, field: int) -> None:
    """`case` pointed at the tenant's seeded object, its body a good one with one field
    (the `field`-th of the generated body, in turn) as generated."""
    path = case.operation.path
    prefix = next((p for p in api.bodies if path.startswith(p)), None)
    prefix = "actuals" if path.endswith("/actuals") else prefix
    if prefix is None:
        return
    names = {"/v1/schedules": "nightly", "/v1/schedules/{name}/backfills": "nightly",
             "/v1/triggers": "inbox"}  # fmt: skip
    case.path_parameters = {
        key: names.get(prefix or "", "") if key == "name" else api.known.get(key, value)
        for key, value in (case.path_parameters or {}).items()
    }
    good = api.bodies[prefix]
    if isinstance(case.body, dict) and case.body and case.operation.method.upper() != "GET":
        key = list(case.body)[field % len(case.body)]
        case.body = {**good, key: case.body[key]}


def test_no_generated_request_makes_a_server_error(api: Api) -> None:
    # Each operation gets its own Hypothesis run (the schemathesis pytest plug-in does
    # not work with this pytest), and every failure is reported, not only the first.
    schema = schemathesis.openapi.from_url(f"{api.server.url}/openapi.json")
    headers = {"Authorization": f"Bearer {api.token}"}
    failures, statuses = [], Counter[int]()
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True)
        @given(case=operation.as_strategy(), field=st.integers(-1, 20))
        def no_server_error(case: schemathesis.Case, field: int) -> None:
            if field >= 0:  # about half: at the tenant's own schedule, trigger, …
                aimed(api, case, field)
            response = case.call(headers=headers, timeout=30)
            statuses[response.status_code] += 1
            case.validate_response(response, checks=[not_a_server_error])

        try:
            no_server_error()
        except Exception as exc:  # a failed check, with the request that made it
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
    print(f"schemathesis: {statuses.total()} requests, by status: {dict(sorted(statuses.items()))}")
    assert statuses.total() >= EXAMPLES and statuses[200] + statuses[201] > 0  # it did test
