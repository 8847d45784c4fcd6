"""The dashboard's job page for a job its publish checks held, in a real browser (as
test_dashboard.py drives it): the checks with bound, observed value and why, then the
Approve and Reject buttons doing what the API does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .servers import Server, ServiceSite, wait_for_job
from .test_dashboard import Visitor, browser  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def held_job(site: ServiceSite, server: Server, token: str, name: str, rows: int) -> str:
    path = site.shared / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"id": i, "x": 1.0 + i}) + "\n" for i in range(rows)))
    body = {"source": {"uri": str(path)}, "model": "double", "id_column": "id", "name": "daily"}
    body["publish_checks"] = {"rows_out_ratio": [0.8, 1.25]}
    with server.client(token) as client:
        job = wait_for_job(client, client.post("/v1/jobs", json=body).json()["id"])
    return str(job["id"]) if job["status"] == "held" else ""


def test_a_held_job_is_approved_and_another_rejected_from_its_page(
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    site = ServiceSite(tmp_path)
    acme = site.token("acme")
    server = Server(site)
    try:
        assert held_job(site, server, acme, "first", 100) == ""  # the first run publishes
        to_approve = held_job(site, server, acme, "second", 40)
        to_reject = held_job(site, server, acme, "third", 40)
        assert to_approve and to_reject
        a = Visitor(browser, server, tmp_path, "acme")
        a.sign_in(acme)
        a.page.goto(f"{server.url}/ui/jobs/{to_approve}")
        assert a.page.locator("#job-state").inner_text() == "held"
        failed = a.page.locator("table.checks tr.check.failed")
        assert failed.count() == 1 and "rows_out_ratio" in failed.inner_text()
        assert "0.4" in failed.inner_text()
        a.page.click("text=Approve: publish it")
        a.page.wait_for_url(f"**/ui/jobs/{to_approve}")
        assert a.page.locator("#job-state").inner_text() == "succeeded"
        assert a.page.locator("text=Approve: publish it").count() == 0

        a.page.goto(f"{server.url}/ui/jobs/{to_reject}")
        a.page.click("text=Reject: discard it")
        a.page.wait_for_url(f"**/ui/jobs/{to_reject}")
        assert a.page.locator("#job-state").inner_text() == "rejected"
        assert a.errors == []
        with server.client(acme) as client:
            assert client.get(f"/v1/jobs/{to_approve}").json()["status"] == "succeeded"
            assert client.get(f"/v1/jobs/{to_reject}").json()["status"] == "rejected"
    finally:
        server.stop()
