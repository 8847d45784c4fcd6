"""Tables through `thresher serve`: a tenant's job reads a Delta table at a pinned version,
or entities joined point-in-time with a feature table, under `allowed_roots` like files,
and gets a 4xx naming the field for a table or an option it may not use."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import datetime, timedelta

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from .servers import TenantSite, one_tenant, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantSite]:
    with one_tenant(tmp_path_factory.mktemp("tables")) as made:
        yield made


def submit(service: TenantSite, source: dict[str, object]) -> httpx.Response:
    body = {"source": source, "model": "double", "id_column": "id", "output_format": "parquet"}
    return service.acme.post("/v1/jobs", json=body)


def results(service: TenantSite, job_id: str) -> pa.Table:
    response = service.acme.get(f"/v1/jobs/{job_id}/results")
    assert response.status_code == 200, response.text
    return pq.read_table(io.BytesIO(response.content)).sort_by("id")


def test_a_delta_table_at_a_pinned_version(service: TenantSite) -> None:
    table = service.site.shared / "customers"
    for version in range(3):  # versions 0, 1, 2: ten rows each
        ids = list(range(version * 10, version * 10 + 10))
        rows = pa.table({"id": ids, "x": [float(i) for i in ids]})
        write_deltalake(str(table), rows, mode="append")

    response = submit(service, {"uri": str(table), "format": "delta", "options": {"version": 1}})
    assert response.status_code == 201, response.text
    job = wait_for_job(service.acme, response.json()["id"])
    assert job["status"] == "succeeded", job
    got = results(service, job["id"])
    assert got.column("id").to_pylist() == list(range(20))  # version 1: two appends
    assert got.column("prediction").to_pylist() == [2.0 * i for i in range(20)]


def test_a_table_or_option_it_may_not_use_is_refused_naming_it(service: TenantSite) -> None:
    outside = service.site.root / "private"
    write_deltalake(str(outside), pa.table({"id": [1], "x": [1.0]}))
    refused = submit(service, {"uri": str(outside), "format": "delta"})
    assert refused.status_code == 403, refused.text
    assert "source.uri" in refused.json()["detail"]

    inside = service.site.shared / "small"
    write_deltalake(str(inside), pa.table({"id": [1], "x": [1.0]}))
    misspelt = submit(service, {"uri": str(inside), "format": "delta", "options": {"versoin": 0}})
    assert misspelt.status_code == 422, misspelt.text
    assert "versoin" in json.dumps(misspelt.json()["detail"])


def features_source(service: TenantSite, feature_uri: str) -> dict[str, object]:
    start = datetime(2026, 1, 1)
    entities = pa.table({"id": [1, 2, 3], "as_of": [start + timedelta(days=d) for d in (1, 2, 3)]})
    uri = service.site.shared / "entities.parquet"
    pq.write_table(entities, uri)
    table = {"uri": feature_uri, "key": "id", "timestamp": "event_time", "columns": ["x"]}
    return {
        "uri": str(uri),
        "format": "features",
        "options": {"timestamp": "as_of", "tables": [table]},
    }


def test_entities_joined_point_in_time_with_a_feature_table(service: TenantSite) -> None:
    start = datetime(2026, 1, 1)
    features = pa.table(
        {
            "id": [1, 1, 2, 3],
            "event_time": [start, start + timedelta(days=5), start, start + timedelta(days=9)],
            "x": [10.0, 99.0, 20.0, 30.0],  # id 1's second value and id 3's are later
        }
    )
    feature_uri = service.site.shared / "spend.parquet"
    pq.write_table(features, feature_uri)
    response = submit(service, features_source(service, str(feature_uri)))
    assert response.status_code == 201, response.text
    job = wait_for_job(service.acme, response.json()["id"])
    assert job["status"] == "succeeded", job
    got = results(service, job["id"])
    assert got.column("id").to_pylist() == [1, 2]
    assert got.column("prediction").to_pylist() == [20.0, 40.0]  # never a later value
    assert job["request_counts"]["failed"] == 1  # id 3 had none yet: a null x, a bad record

    secret = service.site.root / "secret.parquet"
    pq.write_table(features, secret)
    refused = submit(service, features_source(service, str(secret)))
    assert refused.status_code == 403, refused.text
    assert "source.options.tables.0.uri" in refused.json()["detail"]
