"""`GET /v1/jobs/{id}/drift` on a real `thresher serve`: two jobs of one tenant, the second
with its feature shifted, compared by id and by name; another tenant sees neither."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROWS = 20_000


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> ServiceSite:
    return ServiceSite(tmp_path_factory.mktemp("drift"))


@pytest.fixture(scope="module")
def server(site: ServiceSite) -> Iterator[Server]:
    running = Server(site)
    yield running
    running.stop()


def write_input(folder: Path, name: str, seed: int, shift: float) -> str:
    rng = np.random.default_rng(seed)
    x = np.abs(rng.normal(1.0, 1.0, ROWS)) + shift  # the model refuses negatives
    path = folder / f"{name}.parquet"
    pq.write_table(pa.table({"id": np.arange(ROWS), "x": x}), path)
    return str(path)


def run_job(client: httpx.Client, uri: str, name: str) -> str:
    body = {"source": {"uri": uri}, "model": "double", "id_column": "id", "name": name}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job = wait_for_job(client, response.json()["id"])
    assert job["status"] == "succeeded", job
    return str(job["id"])


def test_drift_of_a_tenants_jobs_by_id_and_name_and_nothing_across_tenants(
    site: ServiceSite, server: Server
) -> None:
    with server.client(site.token("acme")) as acme, server.client(site.token("globex")) as globex:
        last_week = run_job(acme, write_input(site.shared, "week", 0, 0.0), "last-week")
        tonight = run_job(acme, write_input(site.shared, "tonight", 1, 1.5), "tonight")

        response = acme.get(f"/v1/jobs/{tonight}/drift", params={"baseline": last_week})
        assert response.status_code == 200, response.text
        report = response.json()
        verdicts = {c["name"]: c["verdict"] for c in report["columns"]}
        assert verdicts == {"x": "drift", "prediction": "drift"}
        assert report["verdict"] == "drift" and report["baseline"].startswith(last_week)
        by_name = acme.get(f"/v1/jobs/{tonight}/drift", params={"baseline": "last-week"})
        assert by_name.status_code == 200 and by_name.json()["baseline"] == report["baseline"]
        itself = acme.get(f"/v1/jobs/{last_week}/drift", params={"baseline": last_week}).json()
        assert itself["verdict"] == "ok"
        assert acme.get(f"/v1/jobs/{tonight}/drift").status_code == 400  # no baseline

        # Another tenant: neither the job nor the baseline exists for it.
        theirs = run_job(globex, write_input(site.shared, "theirs", 2, 0.0), "theirs")
        for path, baseline in [
            (f"/v1/jobs/{tonight}/drift", last_week),  # acme's job
            (f"/v1/jobs/{theirs}/drift", last_week),  # acme's baseline, by id
            (f"/v1/jobs/{theirs}/drift", "last-week"),  # and by name
        ]:
            refused = globex.get(path, params={"baseline": baseline})
            assert refused.status_code == 404, refused.text
        assert (
            globex.get(f"/v1/jobs/{theirs}/drift", params={"baseline": theirs}).status_code == 200
        )
        assert acme.get(f"/v1/jobs/{tonight}/drift", params={"baseline": theirs}).status_code == 404
