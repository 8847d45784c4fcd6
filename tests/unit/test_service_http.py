"""The whole HTTP app in this process (FastAPI's TestClient, no background threads): what
a careless or hostile client sends gets a 4xx naming the field, never a 500; limits hold;
and nothing of the server's private paths, files or other tenants leaks out."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from thresher.service.app import create_app
from thresher.service.config import ServerConfig, prepare
from thresher.service.downloads import stream_errors
from thresher.service.policies.auth import create_token
from thresher.service.policies.disclosure import private_roots
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import JobState, open_store

MODEL = """
class Double:
    def predict(self, batch):
        return {"prediction": batch["x"] * 2}
"""
ROWS = b'{"id": 1, "x": 1.0}\n{"id": 2, "x": 2.0}\n'
BOUNDARY = "thresher-test-boundary"


@dataclass
class Api:
    state: ServiceState
    client: TestClient
    tokens: dict[str, str]
    shared: Path

    def auth(self, tenant: str = "acme") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[tenant]}"}

    def upload(self, data: bytes = ROWS, tenant: str = "acme") -> dict[str, Any]:
        response = self.client.post(
            "/v1/files", files={"file": ("in.jsonl", data)}, headers=self.auth(tenant)
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    def submit(
        self, body: dict[str, Any], tenant: str = "acme", key: str | None = None
    ) -> Response:
        headers = self.auth(tenant) | ({"Idempotency-Key": key} if key else {})
        return self.client.post("/v1/jobs", json=body, headers=headers)

    def job_on_upload(self, tenant: str = "acme", **fields: Any) -> dict[str, Any]:
        file_id = self.upload(tenant=tenant)["id"]
        response = self.submit({"input_file_id": file_id, "model": "double", **fields}, tenant)
        assert response.status_code == 201, response.text
        return dict(response.json())

    def multipart(self, body: bytes, boundary: str = BOUNDARY) -> Response:
        headers = self.auth() | {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        return self.client.post("/v1/files", content=body, headers=headers)

    def uploads(self) -> list[Path]:
        folder = self.state.uploads_dir
        return sorted(folder.iterdir()) if folder.exists() else []


def make_api(tmp_path: Path, **settings: Any) -> Api:
    (tmp_path / "double.py").write_text(MODEL)
    shared = tmp_path / "shared"
    shared.mkdir()
    model = ModelSection(kind="python", uri=f"{tmp_path / 'double.py'}:Double")
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            models={"double": model},
            allowed_roots=[str(shared)],
            **settings,
        )
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    state = ServiceState(store=store, config=config, data_dir=config.data_dir)
    tokens = {tenant: create_token(store, tenant) for tenant in ("acme", "globex", "ops")}
    client = TestClient(create_app(state, background=False), raise_server_exceptions=False)
    return Api(state, client, tokens, shared)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    made = make_api(tmp_path)
    with made.client:
        yield made


def file_part(data: bytes, closing: bool = True) -> bytes:
    head = (
        f"--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    return head + data + (f"\r\n--{BOUNDARY}--\r\n".encode() if closing else b"")


# -- finding 6: bad numbers and strings are 4xx naming the field -----------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"priority": 2**63}, "priority"),
        ({"priority": 1_000_001}, "priority"),
        ({"batch": {"max_memory": "1e400GB"}}, "max_memory"),
        ({"batch": {"max_memory": "99999999999999999999GB"}}, "max_memory"),
    ],
)
def test_numbers_past_their_range_are_422_naming_the_field(
    api: Api, fields: dict[str, Any], named: str
) -> None:
    file_id = api.upload()["id"]
    response = api.submit({"input_file_id": file_id, "model": "double", **fields})
    assert response.status_code == 422, response.text
    assert named in response.text


def test_a_priority_within_range_is_kept(api: Api) -> None:
    assert api.job_on_upload(priority=-1_000_000)["priority"] == -1_000_000


def test_a_nul_in_source_uri_is_refused_naming_it(api: Api) -> None:
    (api.shared / "in.jsonl").write_bytes(ROWS)
    response = api.submit({"source": {"uri": f"{api.shared}/in.jsonl\x00.csv"}, "model": "double"})
    assert response.status_code == 422, response.text
    assert "source" in response.text and "uri" in response.text


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "job\x00"},
        {"model": "double\r\n"},
        {"id_column": "id\x1b[2J"},
        {"model": "m" * 300},
        {"columns": ["c" * 2000]},
        {"keep_columns": [f"k{i}" for i in range(20_000)]},
    ],
)
def test_text_fields_take_no_control_characters_and_have_a_length(
    api: Api, fields: dict[str, Any]
) -> None:
    file_id = api.upload()["id"]
    response = api.submit({"input_file_id": file_id, "model": "double", **fields})
    assert response.status_code == 422, response.text
    assert next(iter(fields)) in response.text


def test_a_multipart_boundary_over_256_characters_is_a_400(api: Api) -> None:
    boundary = "b" * 300
    body = f"--{boundary}\r\n".encode() + file_part(ROWS).split(b"\r\n", 1)[1]
    response = api.multipart(body, boundary=boundary)
    assert response.status_code == 400, response.text
    assert api.uploads() == []


# -- finding 8: information and limits -------------------------------------------------


def test_a_job_message_shows_files_by_name_never_server_paths(api: Api) -> None:
    job = api.job_on_upload()
    upload = next(api.state.uploads_dir.glob("*.jsonl"))
    model_file = api.state.config.models["double"].uri.rpartition(":")[0]
    message = (
        f"source: cannot read {upload}: bad line; see file://{api.state.buffer_dir}/batch-1.jsonl"
        f" and '{api.state.output_dir(job['id'])}/_errors/part-00000.jsonl'; model {model_file}"
        f" under {api.state.data_dir}"
    )
    api.state.store.finish(job["id"], JobState.FAILED, None, message)
    shown = api.client.get(f"/v1/jobs/{job['id']}", headers=api.auth()).json()["message"]
    listed = api.client.get("/v1/jobs", headers=api.auth()).json()["data"][0]["message"]
    assert shown == listed
    root = str(api.state.data_dir.parent)
    assert root not in shown, shown
    assert upload.name in shown and "batch-1.jsonl" in shown and "part-00000.jsonl" in shown
    assert "double.py" in shown and "bad line" in shown


def test_a_buffered_records_error_and_an_error_rows_message_hide_server_paths(
    api: Api, tmp_path: Path
) -> None:
    batch_file = api.state.buffer_dir / "batch-1.jsonl"
    posted = api.client.post(
        "/v1/requests",
        json={"custom_id": "c1", "model": "double", "input": {"x": 1}},
        headers=api.auth(),
    )
    assert posted.status_code == 202, posted.text
    table = api.state.store.requests
    assert table.claim_batch("acme", "double", "batch-1", 10) == 1
    error = {"stage": "job", "error": "job failed", "message": f"cannot read {batch_file}: x"}
    table.settle("batch-1", None, {}, error)
    answer = api.client.get("/v1/requests/c1", headers=api.auth()).json()
    assert answer["error"]["message"] == "cannot read batch-1.jsonl: x"

    part = tmp_path / "part-00000.jsonl"
    row = {"source": str(batch_file), "line": 3, "message": f"{batch_file} line 3: bad"}
    part.write_text(json.dumps(row) + "\n")
    (shown,) = [
        json.loads(line)
        for chunk in stream_errors([part], "jsonl", private_roots(api.state))
        for line in chunk.decode().splitlines()
    ]
    assert shown == {"source": "batch-1.jsonl", "line": 3, "message": "batch-1.jsonl line 3: bad"}


def running_job(api: Api, tenant: str) -> str:
    """A job of `tenant` that the store says is running, with one attempt started."""
    job_id = str(api.job_on_upload(tenant)["id"])
    store = api.state.store
    claimed = store.claim_next_queued()
    assert claimed is not None and claimed.id == job_id
    store.set_plan(job_id, {"shards": [{}]})
    store.attempt_started(job_id, 0, f"{job_id}-a1", 1)
    return job_id


def test_metrics_show_a_tenant_its_own_jobs_only(tmp_path: Path) -> None:
    api = make_api(tmp_path, metrics_operators=["ops"])
    with api.client:
        mine, theirs = running_job(api, "acme"), running_job(api, "globex")
        api.job_on_upload("globex")
        acme = api.client.get("/metrics", headers=api.auth("acme")).text
        ops = api.client.get("/metrics", headers=api.auth("ops")).text
    assert mine in acme and theirs not in acme and 'tenant="globex"' not in acme
    assert metric(acme, "thresher_jobs", state="running") == 1
    assert metric(acme, "thresher_jobs", state="queued") == 0
    assert mine in ops and theirs in ops  # an operator sees every tenant's
    assert metric(ops, "thresher_jobs", state="running") == 2
    assert metric(ops, "thresher_jobs", state="queued", tenant="globex") == 1
    assert metric(ops, "thresher_job_rows_per_second", job_id=theirs, tenant="globex") >= 0
    assert 'job="' not in ops  # job_id: Prometheus keeps `job` for its scrape job
    # the server's own figures, every tenant's traffic in them, for the host-wide view only
    assert metric(ops, "thresher_http_request_duration_seconds_count", path="/v1/jobs") >= 1
    assert metric(ops, "process_resident_memory_bytes") > 0
    assert "process_" not in acme and "http_request" not in acme


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`, as Prometheus' own
    parser reads the exposition (a malformed one raises)."""
    from prometheus_client.parser import text_string_to_metric_families

    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    ]
    assert found, f"no {name} {labels} in the metrics"
    return float(sum(found))


def test_an_idempotency_key_with_another_body_is_422(api: Api) -> None:
    file_id = api.upload()["id"]
    body = {"input_file_id": file_id, "model": "double"}
    first = api.submit(body, key="nightly")
    again = api.submit(body, key="nightly")
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    other = api.submit({**body, "priority": 5}, key="nightly")
    assert other.status_code == 422, other.text
    assert "Idempotency-Key" in other.text
    assert [j["id"] for j in api.client.get("/v1/jobs", headers=api.auth()).json()["data"]] == [
        first.json()["id"]
    ]


def test_an_idempotency_key_has_a_length(api: Api) -> None:
    file_id = api.upload()["id"]
    response = api.submit({"input_file_id": file_id, "model": "double"}, key="k" * 256)
    assert response.status_code == 422, response.text
    assert "idempotency-key" in response.text.lower()


def test_a_multipart_body_without_its_closing_boundary_is_refused(api: Api) -> None:
    response = api.multipart(file_part(ROWS, closing=False))
    assert response.status_code == 400, response.text
    assert "closing boundary" in response.json()["detail"]
    assert api.uploads() == []
    assert api.multipart(file_part(ROWS)).status_code == 201


def test_a_json_body_past_the_limit_is_413_whether_declared_or_streamed(api: Api) -> None:
    limit = api.state.config.max_request_bytes
    big = b'{"model": "double", "name": "' + b"x" * limit + b'"}'
    headers = api.auth() | {"Content-Type": "application/json"}
    declared = api.client.post("/v1/jobs", content=big, headers=headers)
    assert declared.status_code == 413, declared.text
    assert f"{limit:,} bytes" in declared.json()["detail"]

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    streamed = api.client.post("/v1/jobs", content=chunks(), headers=headers)
    assert streamed.status_code == 413, streamed.text


def test_a_422_never_echoes_what_was_sent(api: Api) -> None:
    file_id = api.upload()["id"]
    name = "n" * 200_000
    response = api.submit({"input_file_id": file_id, "model": "double", "name": name})
    assert response.status_code == 422
    assert len(response.content) < 2_000 and "name" in response.text


def test_a_webhook_url_with_a_nul_or_crlf_is_refused_at_submission(api: Api) -> None:
    for url in ("http://93.184.216.34/hook\x00", "http://93.184.216.34/h\r\nX-Evil: 1"):
        file_id = api.upload()["id"]
        body = {"input_file_id": file_id, "model": "double", "notify": {"webhook": url}}
        response = api.submit(body)
        assert response.status_code == 422, response.text
        assert "webhook" in response.text


def test_uploads_and_the_data_dir_are_private_to_the_server_user(api: Api) -> None:
    api.upload()
    (upload,) = api.uploads()
    assert stat.S_IMODE(upload.stat().st_mode) == 0o600
    assert stat.S_IMODE(api.state.uploads_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(api.state.data_dir.stat().st_mode) == 0o700


def test_docs_are_off_and_the_openapi_document_stays(api: Api) -> None:
    assert api.client.get("/docs").status_code == 404
    assert api.client.get("/redoc").status_code == 404
    assert api.client.get("/openapi.json").json()["info"]["title"] == "thresher"


def test_a_revoked_token_is_401(api: Api) -> None:
    from thresher.service.policies.auth import list_tokens, revoke_token

    assert api.client.get("/v1/jobs", headers=api.auth("globex")).status_code == 200
    (globex,) = [t for t in list_tokens(api.state.store) if t.tenant == "globex"]
    assert revoke_token(api.state.store, globex.fingerprint) == globex
    assert api.client.get("/v1/jobs", headers=api.auth("globex")).status_code == 401
    assert api.client.get("/v1/jobs", headers=api.auth("acme")).status_code == 200


def test_a_profile_a_newer_thresher_wrote_is_a_409_not_a_500(api: Api) -> None:
    job = api.job_on_upload()
    with api.state.store.db.transaction() as cur:
        cur.execute(
            "INSERT INTO thresher_profiles (subject, profile, created_at) VALUES (?, ?, ?)",
            (job["id"], '{"version": 99, "rows": 1, "columns": {}}', "2026-12-03T00:00:00Z"),
        )
    response = api.client.get(f"/v1/jobs/{job['id']}/profile", headers=api.auth())
    assert response.status_code == 409, response.text
    assert "written by a newer thresher" in response.json()["detail"]
