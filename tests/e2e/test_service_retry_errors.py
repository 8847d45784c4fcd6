"""`POST /v1/jobs/{id}/retry-errors` and the dashboard's Retry button on a real `thresher
serve`: after the model is fixed, a finished job's rejected rows run again, each ending in
the output once; the job is `running` meanwhile (asking again is 409); another tenant's
job is 404; the round holds its job's worker slots while it runs. A round whose process
is SIGKILLed mid-way leaves the job as it was, saying so, and asking again (on a
restarted server) finishes it, each row still once."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .servers import FINISHED, MODELS, Server, ServiceSite, wait_for_job
from .test_dashboard import Visitor, browser  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The model fixed: a negative x is doubled too. A worker predicting a negative x writes its
# pid to `retrying`, and while a file `hang` is there it waits (to be killed mid-round).
FIXED = MODELS.replace(
    """        if (x < 0).any():
            raise ValueError("x must not be negative")
""",
    """        if (x < 0).any():
            import os, pathlib
            here = pathlib.Path(__file__)
            here.with_name("retrying").write_text(str(os.getpid()))
            while here.with_name("hang").exists():
                time.sleep(0.1)
""",
)
ROWS, NEGATIVE = 60, range(0, 60, 7)  # 9 rows the first model rejects


def finished_with_errors(site: ServiceSite, client: httpx.Client) -> dict[str, Any]:
    return jobs_finished_with_errors(site, client, 1)[0]


def jobs_finished_with_errors(
    site: ServiceSite, client: httpx.Client, count: int
) -> list[dict[str, Any]]:
    """`count` jobs whose model rejected the negative rows, then the model fixed."""
    path = site.shared / "nightly.jsonl"
    rows = [{"id": i, "x": -1.0 - i if i in NEGATIVE else 1.0 + i} for i in range(ROWS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    body = {"source": {"uri": str(path)}, "model": "double", "id_column": "id", "name": "nightly"}
    jobs = [
        wait_for_job(client, client.post("/v1/jobs", json=body).json()["id"]) for _ in range(count)
    ]
    for job in jobs:
        assert job["errors"] == len(NEGATIVE), job
        assert job["retry_rounds"] == 0
    site.models.write_text(FIXED, encoding="utf-8")
    return jobs


def retried(client: httpx.Client, job_id: str, rounds: int) -> dict[str, Any]:
    """The job once `rounds` retry rounds have ended and the last has given its worker
    slots back (its process ends a moment after it records the job's end)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["retry_rounds"] >= rounds and job["status"] in FINISHED and not job["slots"]:
            return dict(job)
        time.sleep(0.1)
    raise AssertionError(f"job {job_id}: no retry round ended: {job}")


def check_every_row_once(client: httpx.Client, job_id: str) -> None:
    lines = client.get(f"/v1/jobs/{job_id}/results").text.splitlines()
    rows = {r["id"]: r["prediction"] for r in map(json.loads, lines)}
    assert len(lines) == len(rows) == ROWS
    assert all(rows[i] == 2 * (-1.0 - i if i in NEGATIVE else 1.0 + i) for i in range(ROWS))
    assert client.get(f"/v1/jobs/{job_id}/errors").text == ""


def test_the_api_retries_the_rejected_rows_once(
    tmp_path: Path,
) -> None:
    site = ServiceSite(tmp_path, settings="[capacity]\ncpu = 1")  # one worker slot
    acme_token, globex_token = site.token("acme"), site.token("globex")
    server = Server(site)
    try:
        with server.client(acme_token) as acme, server.client(globex_token) as globex:
            job, other = jobs_finished_with_errors(site, acme, 2)
            job_id = job["id"]
            assert globex.post(f"/v1/jobs/{job_id}/retry-errors").status_code == 404

            # While the round's worker waits, the job is running, and asking again is 409.
            (tmp_path / "hang").touch()
            accepted = acme.post(f"/v1/jobs/{job_id}/retry-errors")
            assert accepted.status_code == 202, accepted.text
            deadline = time.monotonic() + 60
            while not (tmp_path / "retrying").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert acme.get(f"/v1/jobs/{job_id}").json()["status"] == "running"
            assert acme.post(f"/v1/jobs/{job_id}/retry-errors").status_code == 409
            # The round holds the one worker slot: another job's round is refused for
            # now, and a job submitted now waits for it.
            refused = acme.post(f"/v1/jobs/{other['id']}/retry-errors")
            assert refused.status_code == 429, refused.text
            assert "worker slots: 1 of 1 in use" in refused.json()["detail"]
            assert refused.headers["Retry-After"] == "5"
            body = {"source": {"uri": str(site.shared / "nightly.jsonl")}, "model": "double",
                    "id_column": "id"}  # fmt: skip
            later = acme.post("/v1/jobs", json=body).json()["id"]
            time.sleep(2)  # the scheduler looks every second
            waiting = acme.get(f"/v1/jobs/{later}").json()
            assert waiting["status"] == "queued", waiting
            assert "worker slots: 1 of 1 in use" in waiting["waiting_for"], waiting
            (tmp_path / "hang").unlink()
            done = retried(acme, job_id, 1)
            assert wait_for_job(acme, later)["status"] == "succeeded"
            retried(acme, later, 0)  # and its slot given back
            assert acme.post(f"/v1/jobs/{other['id']}/retry-errors").status_code == 202
            assert retried(acme, other["id"], 1)["errors"] == 0
            assert done["status"] == "succeeded", done
            assert done["errors"] == 0 and done["request_counts"]["completed"] == ROWS
            check_every_row_once(acme, job_id)
            # Again with nothing left to retry: a round over no shards, nothing changed.
            assert acme.post(f"/v1/jobs/{job_id}/retry-errors").status_code == 202
            assert retried(acme, job_id, 2)["errors"] == 0
            check_every_row_once(acme, job_id)
    finally:
        server.stop()


def test_a_round_killed_mid_way_is_finished_by_asking_again(tmp_path: Path) -> None:
    """The round's process dies (SIGKILL) after committing its shard's fixed rows and
    before recording them: the server's watcher puts the job back as it was and says why;
    a round asked of a restarted server takes the rows the ledger holds as committed."""
    site = ServiceSite(tmp_path)
    token = site.token("acme")
    server = Server(site, env={"THRESHER_FAULT": "retry_after_output"})
    try:
        with server.client(token) as client:
            before = finished_with_errors(site, client)
            assert client.post(f"/v1/jobs/{before['id']}/retry-errors").status_code == 202
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                killed = client.get(f"/v1/jobs/{before['id']}").json()
                if killed["status"] != "running" and killed["message"]:
                    break
                time.sleep(0.1)
            assert killed["status"] == before["status"], killed
            assert "retry round's process was killed by signal 9" in killed["message"], killed
            assert killed["retry_rounds"] == 0 and killed["errors"] == len(NEGATIVE)
    finally:
        server.stop()
    server = Server(site)
    try:
        with server.client(token) as client:
            assert client.post(f"/v1/jobs/{before['id']}/retry-errors").status_code == 202
            done = retried(client, before["id"], 1)
            assert done["status"] == "succeeded" and done["errors"] == 0, done
            check_every_row_once(client, before["id"])
    finally:
        server.stop()


def test_the_dashboard_s_retry_button(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    site = ServiceSite(tmp_path)
    acme = site.token("acme")
    server = Server(site)
    try:
        with server.client(acme) as client:
            job_id = finished_with_errors(site, client)["id"]
        visitor = Visitor(browser, server, tmp_path, "acme")
        visitor.sign_in(acme)
        visitor.page.goto(f"{server.url}/ui/jobs/{job_id}")
        visitor.page.click("#retry-errors")
        visitor.page.wait_for_url(f"**/ui/jobs/{job_id}")
        with server.client(acme) as client:
            assert retried(client, job_id, 1)["errors"] == 0
            check_every_row_once(client, job_id)
        visitor.page.goto(f"{server.url}/ui/jobs/{job_id}")
        assert visitor.page.locator("#retry-errors").count() == 0  # no bad rows left
        assert "Retry rounds" in visitor.page.inner_text("dl.facts")
        visitor.shot("job-retried")
        assert visitor.errors == []
    finally:
        server.stop()
