"""Actuals and quality over HTTP against a real `thresher serve`: labels posted as
records and as an uploaded file join a finished job's predictions by id, exactly once;
`GET /v1/jobs/{id}/quality` equals scikit-learn's metrics on the labelled rows; another
tenant gets 404 for both, as for a job that never was."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from sklearn import metrics

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, ...]]:
    site = ServiceSite(tmp_path_factory.mktemp("quality"))
    acme, globex = site.token("acme"), site.token("globex")
    server = Server(site)
    with server.client(acme) as a, server.client(globex) as g:
        yield a, g
    server.stop()


def finished_job(client: httpx.Client, xs: list[float]) -> str:
    lines = "".join(json.dumps({"id": i, "x": x}) + "\n" for i, x in enumerate(xs))
    uploaded = client.post("/v1/files", files={"file": ("in.jsonl", lines.encode())})
    assert uploaded.status_code == 201, uploaded.text
    body = {"input_file_id": uploaded.json()["id"], "model": "double", "id_column": "id"}
    submitted = client.post("/v1/jobs", json=body)
    assert submitted.status_code == 201, submitted.text
    job = wait_for_job(client, submitted.json()["id"])
    assert job["status"] == "succeeded", job
    return str(job["id"])


def test_actuals_join_by_id_and_quality_equals_sklearns(clients: tuple[httpx.Client, ...]) -> None:
    acme, _ = clients
    xs = [i / 10 for i in range(50)]
    job = finished_job(acme, xs)
    truth = [2 * x + (0.3 if i % 3 else -0.2) for i, x in enumerate(xs)]
    records = [{"id": i, "label": truth[i]} for i in range(30)] + [{"id": 500, "label": 1.0}]
    posted = acme.post(f"/v1/jobs/{job}/actuals", json={"records": records})
    assert posted.status_code == 201, posted.text
    part = posted.json()
    assert (part["new"], part["matched"], part["unknown"], part["unknown_ids"]) == (
        True, 30, 1, ["500"]
    )  # fmt: skip
    again = acme.post(f"/v1/jobs/{job}/actuals", json={"records": records}).json()
    assert (again["new"], again["labelled"]) == (False, 30)

    csv = "record,outcome\n" + "".join(f"{i},{truth[i]!r}\n" for i in range(25, 50))
    uploaded = acme.post("/v1/files", files={"file": ("week2.csv", csv.encode())}).json()
    body = {"file_id": uploaded["id"], "id_column": "record", "label_column": "outcome"}
    from_file = acme.post(f"/v1/jobs/{job}/actuals", json=body)
    assert from_file.status_code == 201, from_file.text
    assert (from_file.json()["matched"], from_file.json()["repeated"]) == (20, 5)
    assert from_file.json()["coverage"] == 1.0 and from_file.json()["source"] == "week2.csv"

    quality = acme.get(f"/v1/jobs/{job}/quality")
    assert quality.status_code == 200, quality.text
    got = quality.json()
    assert (got["task"], got["labelled"], got["predicted"], got["parts"]) == (
        "regression", 50, 50, 2
    )  # fmt: skip
    predicted = 2.0 * np.array(xs)
    assert got["metrics"]["mae"] == pytest.approx(metrics.mean_absolute_error(truth, predicted))
    assert got["metrics"]["rmse"] == pytest.approx(
        metrics.root_mean_squared_error(truth, predicted)
    )
    assert got["metrics"]["r2"] == pytest.approx(metrics.r2_score(truth, predicted))
    forced = acme.get(f"/v1/jobs/{job}/quality", params={"task": "classification"}).json()
    assert forced["task"] == "classification" and forced["metrics"]["accuracy"] == 0.0


def test_another_tenant_gets_404_and_bad_parts_get_422(
    clients: tuple[httpx.Client, ...],
) -> None:
    acme, globex = clients
    job = finished_job(acme, [1.0, 2.0])
    records = {"records": [{"id": 0, "label": 2.0}]}
    assert globex.post(f"/v1/jobs/{job}/actuals", json=records).status_code == 404
    assert globex.get(f"/v1/jobs/{job}/quality").status_code == 404
    assert acme.get("/v1/jobs/no-such-job/quality").status_code == 404
    theirs = globex.post("/v1/files", files={"file": ("l.csv", b"id,label\n0,1\n")}).json()
    borrowed = acme.post(f"/v1/jobs/{job}/actuals", json={"file_id": theirs["id"]})
    assert borrowed.status_code == 404  # another tenant's file, as one that never was
    both = acme.post(f"/v1/jobs/{job}/actuals", json={**records, "file_id": theirs["id"]})
    assert both.status_code == 422
    blank = acme.post(f"/v1/jobs/{job}/actuals", json={"records": [{"id": " ", "label": 1}]})
    assert blank.status_code == 422 and "records[0]: id column 'id' is empty" in blank.text
    assert acme.get(f"/v1/jobs/{job}/quality").json()["metrics"] is None
