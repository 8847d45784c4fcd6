"""The publish gate on a real `thresher serve`: a tenant's job that fails its checks is
`held` (why, check by check, in `GET /v1/jobs/{id}`; no results, no webhook), then
approved (published, its success webhook sent once) or rejected; another tenant can do
neither; a custom check, code the server would run, is refused."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .servers import Inbox, Server, ServiceSite, wait_for_job, webhook_inbox

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SETTINGS = """webhook_allow_private = true
webhook_retry_first = 1.0
webhook_retry_longest = 1.0"""


@pytest.fixture
def site(tmp_path: Path) -> ServiceSite:
    return ServiceSite(tmp_path, settings=SETTINGS)


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    with webhook_inbox() as receiver:
        yield receiver


def write_input(site: ServiceSite, name: str, rows: int) -> str:
    path = site.shared / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"id": i, "x": 1.0 + i}) + "\n" for i in range(rows)))
    return str(path)


def submit(client: httpx.Client, uri: str, inbox: Inbox, **extra: Any) -> dict[str, Any]:
    body = {"source": {"uri": uri}, "model": "double", "id_column": "id", "name": "nightly"}
    body |= {"notify": {"webhook": inbox.url()}, **extra}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return wait_for_job(client, response.json()["id"])


def events_of(inbox: Inbox, job_id: str) -> list[str]:
    return [json.loads(b)["event"] for b in inbox.bodies if json.loads(b)["job_id"] == job_id]


def test_held_then_approved_or_rejected_through_the_api(site: ServiceSite, inbox: Inbox) -> None:
    checks = {"rows_out_ratio": [0.8, 1.25], "max_error_rate": 0.1}
    server = Server(site)
    acme_token, globex_token = site.token("acme"), site.token("globex")
    try:
        with server.client(acme_token) as acme, server.client(globex_token) as globex:
            first = submit(acme, write_input(site, "monday", 400), inbox, publish_checks=checks)
            assert first["status"] == "succeeded", first  # the first run has nothing to compare
            inbox.wait(1)

            held = submit(acme, write_input(site, "tuesday", 200), inbox, publish_checks=checks)
            job_id = held["id"]
            assert held["status"] == "held", held
            assert "rows_out_ratio" in held["message"]
            verdicts = {c["name"]: c for c in held["publish_checks"]}
            assert verdicts["rows_out_ratio"]["observed"] == 0.5
            assert verdicts["rows_out_ratio"]["passed"] is False
            assert verdicts["max_error_rate"]["passed"] is True
            assert acme.get(f"/v1/jobs/{job_id}/results").status_code == 409
            assert acme.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "held"

            # Another tenant's job is 404, as one that never was.
            assert globex.post(f"/v1/jobs/{job_id}/approve").status_code == 404
            assert globex.post(f"/v1/jobs/{job_id}/reject").status_code == 404
            time.sleep(1.5)
            assert events_of(inbox, job_id) == [], "a held job sent a webhook"

            approved = acme.post(f"/v1/jobs/{job_id}/approve")
            assert approved.status_code == 200, approved.text
            assert approved.json()["status"] == "succeeded"
            lines = acme.get(f"/v1/jobs/{job_id}/results").text.splitlines()
            assert sorted(json.loads(line)["id"] for line in lines) == list(range(200))
            inbox.wait(2)
            again = acme.post(f"/v1/jobs/{job_id}/approve")
            assert again.status_code == 200 and again.json()["status"] == "succeeded"
            assert acme.post(f"/v1/jobs/{job_id}/reject").status_code == 409
            time.sleep(1.5)
            assert events_of(inbox, job_id) == ["job.completed"], "sent once, after the approve"

            tighter = {"rows_out_ratio": [2.0, 3.0]}
            second = submit(
                acme, write_input(site, "wednesday", 200), inbox, publish_checks=tighter
            )
            assert second["status"] == "held"
            rejected = acme.post(f"/v1/jobs/{second['id']}/reject")
            assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
            assert acme.post(f"/v1/jobs/{second['id']}/reject").json()["status"] == "rejected"
            assert acme.post(f"/v1/jobs/{second['id']}/approve").status_code == 409
            assert acme.get(f"/v1/jobs/{second['id']}/results").status_code == 409
            assert events_of(inbox, second["id"]) == []

            custom = {"custom": ["shutil:rmtree"]}
            body = {"source": {"uri": write_input(site, "x", 5)}, "model": "double"}
            refused = acme.post("/v1/jobs", json={**body, "publish_checks": custom})
            assert refused.status_code == 422 and "publish_checks.custom" in refused.text
    finally:
        server.stop()


@pytest.mark.parametrize("fault", ["approve_decided", "approve_published", "reject_decided"])
def test_a_server_killed_mid_decision_finishes_it_when_asked_again(
    site: ServiceSite, inbox: Inbox, fault: str
) -> None:
    """The server dies (SIGKILL, at the crash point) inside the approve or reject call;
    after a restart the same call finishes the decision: the output published (its
    webhook sent once) or discarded, never both."""
    checks = {"rows_out_ratio": [0.8, 1.25]}
    verb = "reject" if fault.startswith("reject") else "approve"
    dying = Server(site, env={"THRESHER_FAULT": fault})
    token = site.token("acme")
    try:
        with dying.client(token) as acme:
            submit(acme, write_input(site, "monday", 300), inbox, publish_checks=checks)
            held = submit(acme, write_input(site, "tuesday", 100), inbox, publish_checks=checks)
            assert held["status"] == "held", held
            with pytest.raises(httpx.TransportError):
                acme.post(f"/v1/jobs/{held['id']}/{verb}")
        assert dying.process.wait(10) != 0
    finally:
        dying.stop()
    server = Server(site)
    try:
        with server.client(token) as acme:
            decided = "approved" if verb == "approve" else "rejected"
            assert acme.get(f"/v1/jobs/{held['id']}").json()["status"] == decided
            other = "reject" if verb == "approve" else "approve"
            assert acme.post(f"/v1/jobs/{held['id']}/{other}").status_code == 409
            done = acme.post(f"/v1/jobs/{held['id']}/{verb}")
            assert done.status_code == 200, done.text
            results = acme.get(f"/v1/jobs/{held['id']}/results")
            if verb == "approve":
                assert done.json()["status"] == "succeeded"
                lines = results.text.splitlines()
                assert sorted(json.loads(line)["id"] for line in lines) == list(range(100))
                inbox.wait(2)
            else:
                assert done.json()["status"] == "rejected" and results.status_code == 409
            time.sleep(1.5)
            told = events_of(inbox, held["id"])
            assert told == (["job.completed"] if verb == "approve" else [])
    finally:
        server.stop()
