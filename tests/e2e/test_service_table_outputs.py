"""A tenant's job writing its predictions to a table through `thresher serve`
(`output_table`): a Delta table appended to and then merged into by id, an Iceberg table
in a SQL catalog, each under `allowed_roots`; the job's status names the version it
made, its bad records download as any job's, its results are read from the table (the
results download says so), and a table or option it may not use is refused naming it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from iceberg_lake import lake

from .servers import TenantSite, one_tenant, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantSite]:
    with one_tenant(tmp_path_factory.mktemp("table-outputs")) as made:
        yield made


def submit(
    service: TenantSite, ids: range, table: dict[str, Any], name: str, bad: int = 7
) -> httpx.Response:
    """A job over `ids` (x = id; the id `bad`'s x missing: one bad record) into `table`."""
    rows = pa.table({"id": list(ids), "x": [None if i == bad else float(i) for i in ids]})
    source = service.site.shared / f"{name}.parquet"
    pq.write_table(rows, source)
    body = {"source": {"uri": str(source)}, "model": "double", "id_column": "id"}
    return service.acme.post("/v1/jobs", json={**body, "output_table": table})


def finished(service: TenantSite, response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    job = wait_for_job(service.acme, response.json()["id"])
    assert job["status"] == "succeeded", job
    return job


def test_a_delta_table_appended_to_then_merged_into_by_id(service: TenantSite) -> None:
    uri = str(service.site.shared / "scores")
    first = finished(service, submit(service, range(10), {"format": "delta", "uri": uri}, "a"))
    assert first["output_table"] == {"format": "delta", "uri": uri, "mode": "append", "version": 0}
    results = service.acme.get(f"/v1/jobs/{first['id']}/results")
    assert results.status_code == 409 and uri in results.text, results.text
    errors = service.acme.get(f"/v1/jobs/{first['id']}/errors")
    assert errors.status_code == 200, errors.text
    assert [json.loads(line)["id"] for line in errors.text.splitlines()] == [7]

    merge = {"format": "delta", "uri": uri, "mode": "merge"}
    second = finished(service, submit(service, range(5, 15), merge, "b", bad=12))
    assert second["output_table"]["version"] == 1
    errors = service.acme.get(f"/v1/jobs/{second['id']}/errors")  # its own, not the first's
    assert [json.loads(line)["id"] for line in errors.text.splitlines()] == [12]
    table = DeltaTable(uri).to_pyarrow_table().sort_by("id")
    assert table.column("id").to_pylist() == [i for i in range(15) if i != 12]  # each id once
    assert table.column("prediction").to_pylist() == [2.0 * i for i in range(15) if i != 12]
    assert [c["thresher.job_id"] for c in DeltaTable(uri).history()] == [second["id"], first["id"]]


def test_an_iceberg_table_in_a_sql_catalog(service: TenantSite) -> None:
    (service.site.shared / "iceberg").mkdir()
    props, catalog = lake(service.site.shared / "iceberg")
    table = {"format": "iceberg", "uri": "db.scores", "options": {"catalog": props}}
    job = finished(service, submit(service, range(6), table, "c"))
    snapshot = catalog.load_table("db.scores").current_snapshot()
    assert job["output_table"]["version"] == snapshot.snapshot_id
    rows = catalog.load_table("db.scores").scan().to_arrow().sort_by("id")
    assert rows.column("prediction").to_pylist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_a_table_or_option_it_may_not_use_is_refused_naming_it(service: TenantSite) -> None:
    outside = str(service.site.root / "private-scores")
    refused = submit(service, range(3), {"format": "delta", "uri": outside}, "d")
    assert refused.status_code == 403 and "output_table.uri" in refused.text, refused.text
    for sly in (  # read as URLs by deltalake: an escape decoded, a query dropped
        f"{service.site.shared}/%2e%2e/private-scores",
        f"file://{service.site.shared}/x?/../../private-scores",
    ):
        refused = submit(service, range(3), {"format": "delta", "uri": sly}, "g")
        assert refused.status_code == 400 and "output_table.uri" in refused.text, refused.text
    (service.site.shared / "lake2").mkdir()
    props, catalog = lake(service.site.shared / "lake2")
    catalog.create_namespace("elsewhere", {"location": str(service.site.root / "outside")})
    table = {"format": "iceberg", "uri": "elsewhere.scores", "options": {"catalog": props}}
    refused = submit(service, range(3), table, "h")  # a new table would go outside
    assert refused.status_code == 403 and "output_table.uri" in refused.text, refused.text
    (service.site.root / "private-lake").mkdir()
    props, _ = lake(service.site.root / "private-lake")
    table = {"format": "iceberg", "uri": "db.scores", "options": {"catalog": props}}
    refused = submit(service, range(3), table, "e")
    assert refused.status_code == 403, refused.text
    assert "output_table.options.catalog" in refused.text
    inside = str(service.site.shared / "other")
    forced = {"format": "delta", "uri": inside, "options": {"force": True}}
    refused = submit(service, range(3), forced, "f")
    assert refused.status_code == 422 and "output_table.options.force" in refused.text
    both = {"format": "delta", "uri": inside}
    body = {"input_file_id": "x", "model": "double", "output_table": both, "output_topic": "t"}
    refused = service.acme.post("/v1/jobs", json=body)
    assert refused.status_code == 422 and "output_table" in refused.text
