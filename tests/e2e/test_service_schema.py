"""Schemathesis drives a running `thresher serve` from its own OpenAPI document: requests
generated for every operation, valid and not, with a tenant's token. No request may make
a server error (5xx), whatever it holds.

Brief in CI (`THRESHER_SCHEMA_EXAMPLES`, default 20 per operation); raise it for a longer
run: `THRESHER_SCHEMA_EXAMPLES=500 pytest tests/e2e/test_service_schema.py`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import schemathesis
from hypothesis import given, settings
from schemathesis.checks import not_a_server_error

from .servers import Server, ServiceSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLES = int(os.environ.get("THRESHER_SCHEMA_EXAMPLES", "20"))


@dataclass(frozen=True)
class Api:
    server: Server
    token: str


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    site = ServiceSite(tmp_path_factory.mktemp("schema"))
    token = site.token("acme")
    (site.shared / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n', encoding="utf-8")
    server = Server(site)
    yield Api(server, token)
    server.stop()


def test_no_generated_request_makes_a_server_error(api: Api) -> None:
    # Each operation gets its own Hypothesis run (the schemathesis pytest plug-in does
    # not work with this pytest), and every failure is reported, not only the first.
    schema = schemathesis.openapi.from_url(f"{api.server.url}/openapi.json")
    headers = {"Authorization": f"Bearer {api.token}"}
    failures, statuses = [], Counter[int]()
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True)
        @given(case=operation.as_strategy())
        def no_server_error(case: schemathesis.Case) -> None:
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
