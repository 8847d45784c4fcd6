"""`thresher serve` with its store in a real PostgreSQL: tokens, files, the job queue,
idempotency and results all live in the shared database (see tests/integration for the
store, sink and source on their own)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from .servers import Server, ServiceSite

pytestmark = pytest.mark.e2e


@pytest.fixture
def pg_store(postgres_server: str, pg_schema: str) -> str:
    """A store URL in a schema of its own."""
    return f"{postgres_server}?options={quote(f'-csearch_path={pg_schema}')}"


def test_the_service_runs_on_a_postgresql_store(tmp_path: Path, pg_store: str) -> None:
    site = ServiceSite(tmp_path)
    site.store = pg_store
    server = Server(site)
    acme, globex = server.client(site.token("acme")), server.client(site.token("globex"))
    try:
        rows = [{"id": i, "x": float(i)} for i in range(30)]
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
        uploaded = acme.post("/v1/files", files={"file": ("in.jsonl", data)}).json()
        body = {"input_file_id": uploaded["id"], "model": "double", "id_column": "id"}
        headers = {"Idempotency-Key": "pg-once"}
        first = acme.post("/v1/jobs", json=body, headers=headers)
        again = acme.post("/v1/jobs", json=body, headers=headers)
        assert first.status_code in (200, 201) and again.status_code in (200, 201)
        job_id = first.json()["id"]
        assert again.json()["id"] == job_id
        job = _wait(acme, job_id)
        assert job["status"] == "succeeded", job
        assert job["request_counts"] == {"total": 30, "completed": 30, "failed": 0}
        got = [
            json.loads(line) for line in acme.get(f"/v1/jobs/{job_id}/results").text.splitlines()
        ]
        assert [r["id"] for r in got] == list(range(30))
        assert [r["prediction"] for r in got] == [2.0 * r["x"] for r in rows]
        assert globex.get(f"/v1/jobs/{job_id}").status_code == 404
        assert len(acme.get("/v1/jobs").json()["data"]) == 1
    finally:
        acme.close()
        globex.close()
        server.stop()


def _wait(client: object, job_id: str, timeout: float = 90) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, object] = client.get(f"/v1/jobs/{job_id}").json()  # type: ignore[attr-defined]
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s")
