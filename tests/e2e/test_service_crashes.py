"""A job whose coordinator crashes takes down nothing but itself.

A hostile input once segfaulted pyarrow inside `thresher serve` while the job was being
planned: the whole server died with no log line, and died again on every restart as it
resumed the job. Now each job is coordinated in a child process; these tests crash it for
real (a signal sent by the process to itself at the `plan_input` crash point, as a native
library's crash would end it) and check that the server lives on, says what happened,
and stops restarting the job after its second crash.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_segfaulting_planner_fails_its_job_and_the_server_lives_on(tmp_path: Path) -> None:
    site = ServiceSite(tmp_path)
    token = site.token("acme")
    server = Server(site, env={"THRESHER_FAULT": "plan_input", "THRESHER_FAULT_SIGNAL": "SIGSEGV"})
    try:
        with server.client(token) as client:
            data = b"".join(json.dumps({"id": i, "x": i}).encode() + b"\n" for i in range(5))
            file_id = client.post("/v1/files", files={"file": ("in.jsonl", data)}).json()["id"]
            body = {"input_file_id": file_id, "model": "double", "id_column": "id"}
            job_id = client.post("/v1/jobs", json=body).json()["id"]
            job = wait_for_job(client, job_id)
            assert client.get("/healthz").status_code == 200  # the server is still up
            second = client.post("/v1/jobs", json=body).json()["id"]
            assert wait_for_job(client, second)["status"] == "failed"  # and still takes jobs
    finally:
        server.stop()
    assert server.process.returncode in (0, -15), server.log.read_text()
    assert job["status"] == "failed", job
    assert "killed by signal 11 (SIGSEGV) while planning its input" in job["message"]
    assert "2 times; not started again" in job["message"]
    assert str(site.data) not in job["message"]  # no server path reaches the tenant
    store = site.store.removeprefix("sqlite:///")
    with closing(sqlite3.connect(store)) as db:
        query = "SELECT crashes FROM thresher_jobs WHERE id = ?"
        (crashes,) = db.execute(query, (job_id,)).fetchone()
    assert crashes == 2  # run once more after the first crash, then given up
