"""`thresher serve --log-format json` as a log shipper reads it: one JSON object a line,
an access line per request (method, route template, status, duration, tenant, request
id), the request id sent back, and a job's own lines carrying its id and the id of the
request that submitted it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROWS = b'{"id": 1, "x": 1.0}\n{"id": 2, "x": 2.0}\n'


def lines(server: Server) -> list[dict[str, Any]]:
    text = server.log.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_json_lines_access_log_and_request_ids_into_the_job(tmp_path: Any) -> None:
    site = ServiceSite(tmp_path)
    token = site.token("acme")
    server = Server(site, args=("--log-format", "json"))
    try:
        with server.client(token) as client:
            uploaded = client.post("/v1/files", files={"file": ("in.jsonl", ROWS)}).json()
            body = {"input_file_id": uploaded["id"], "model": "double", "id_column": "id"}
            sent = client.post("/v1/jobs", json=body, headers={"x-request-id": "ci-run-42"})
            assert sent.status_code == 201, sent.text
            assert sent.headers["x-request-id"] == "ci-run-42"
            job_id = sent.json()["id"]
            assert wait_for_job(client, job_id)["status"] == "succeeded"
            made = client.get(f"/v1/jobs/{job_id}", headers={"x-request-id": "bad id\x7f"})
            assert len(made.headers["x-request-id"]) == 32  # not a plain token: a new one
            client.get("/v1/jobs/nope")
        with server.client() as anonymous:
            anonymous.get("/v1/jobs")
        time.sleep(0.5)  # the last access line is written after its answer
    finally:
        server.stop()

    logged = lines(server)  # every line is one JSON object, or json.loads fails here
    access = [line for line in logged if line["logger"] == "thresher.access"]
    submit = next(a for a in access if a["method"] == "POST" and a["path"] == "/v1/jobs")
    assert submit["status"] == 201 and submit["tenant"] == "acme"
    assert submit["request_id"] == "ci-run-42" and submit["duration_ms"] >= 0
    paths = {(a["method"], a["path"], a["status"]) for a in access}
    assert ("GET", "/v1/jobs/{job_id}", 404) in paths  # the route's template, not the id
    assert ("GET", "/v1/jobs", 401) in paths
    assert {"time", "level", "logger", "message"} <= set(submit)
    from_job = [line for line in logged if line.get("job_id") == job_id]
    assert from_job, "the job process wrote no line with its id"
    assert all(line["request_id"] == "ci-run-42" for line in from_job)
