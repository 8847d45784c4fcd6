"""`thresher serve` as a client meets it: a real uvicorn server in a subprocess, real jobs
run by the real engine, and plain HTTP (httpx) from the test.

Upload → submit → poll → download; many clients at once; idempotency keys; tenants that
cannot see each other; paths outside the allowed roots; oversized uploads; an unknown
model; health, metrics and the OpenAPI document; and a server killed with SIGKILL in the
middle of a job, whose job still completes exactly once after a restart.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from .servers import FINISHED, Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@dataclass
class Service:
    """One running server, its folder, and a client per tenant."""

    site: ServiceSite
    server: Server
    acme: httpx.Client
    globex: httpx.Client


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    site = ServiceSite(tmp_path_factory.mktemp("service"))
    acme, globex = site.token("acme"), site.token("globex")
    server = Server(site)
    with server.client(acme) as a, server.client(globex) as g:
        yield Service(site, server, a, g)
    server.stop()


def jsonl(rows: list[dict[str, Any]], extra_lines: tuple[str, ...] = ()) -> bytes:
    lines = [json.dumps(r) for r in rows] + list(extra_lines)
    return ("\n".join(lines) + "\n").encode()


def upload(client: httpx.Client, data: bytes, name: str = "input.jsonl") -> dict[str, Any]:
    response = client.post("/v1/files", files={"file": (name, data)})
    assert response.status_code == 201, response.text
    return dict(response.json())


def submit(client: httpx.Client, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post("/v1/jobs", json=body, headers=headers)


def direct_predictions(site: ServiceSite, xs: list[float]) -> np.ndarray:
    """The model called directly, as the oracle for what the service returns."""
    spec = importlib.util.spec_from_file_location("service_models", site.models)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return np.asarray(module.Double().predict({"x": np.array(xs)})["prediction"])


def test_upload_submit_poll_and_download_results_and_errors(service: Service) -> None:
    rows = [{"id": i, "x": i / 4} for i in range(40)]
    rows[7]["x"] = -1.0  # the model rejects it: a predict-stage error
    data = jsonl(rows, extra_lines=('{"id": 99, "x": ',))  # cut short: a decode error
    uploaded = upload(service.acme, data, "../../etc/evil name.jsonl")
    assert uploaded["filename"] == "../../etc/evil name.jsonl"  # kept as metadata only
    assert uploaded["bytes"] == len(data) and "path" not in uploaded
    stored = list((service.site.data / "uploads").glob(f"{uploaded['id']}.*"))
    assert [p.name for p in stored] == [f"{uploaded['id']}.jsonl"]
    assert service.acme.get(f"/v1/files/{uploaded['id']}").json() == uploaded

    response = submit(
        service.acme, {"input_file_id": uploaded["id"], "model": "double", "id_column": "id"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["status"] in ("queued", "running")
    job = wait_for_job(service.acme, response.json()["id"])

    assert job["status"] == "succeeded", job
    assert job["request_counts"] == {"total": 41, "completed": 39, "failed": 2}
    assert job["errors"] == 2 and job["model"] == "double"
    assert job["progress"]["shards_done"] == job["progress"]["shards_total"] >= 1
    results = service.acme.get(f"/v1/jobs/{job['id']}/results")
    assert results.status_code == 200
    assert results.headers["content-type"].startswith("application/x-ndjson")
    got = [json.loads(line) for line in results.text.splitlines()]
    good = [r for r in rows if r["x"] >= 0]
    assert [r["id"] for r in got] == [r["id"] for r in good]  # input order
    expected = direct_predictions(service.site, [r["x"] for r in good])
    np.testing.assert_array_equal([r["prediction"] for r in got], expected)

    errors = [
        json.loads(line)
        for line in service.acme.get(f"/v1/jobs/{job['id']}/errors").text.splitlines()
    ]
    assert sorted((e["stage"], e["line"]) for e in errors) == [("decode", 41), ("predict", 8)]
    assert {e["source"] for e in errors} == {f"{uploaded['id']}.jsonl"}  # no server path
    assert next(e for e in errors if e["stage"] == "predict")["id"] == 7

    as_csv = pacsv.read_csv(
        io.BytesIO(service.acme.get(f"/v1/jobs/{job['id']}/results?format=csv").content)
    )
    as_parquet = pq.read_table(
        io.BytesIO(
            service.acme.get(f"/v1/jobs/{job['id']}/results", params={"format": "parquet"}).content
        )
    )
    for table in (as_csv, as_parquet):
        assert table.column("id").to_pylist() == [r["id"] for r in good]
        np.testing.assert_array_equal(table.column("prediction").to_numpy(), expected)


def test_fifty_concurrent_submissions_all_complete(service: Service, record_property: Any) -> None:
    file_id = upload(service.acme, jsonl([{"id": i, "x": float(i)} for i in range(20)]))["id"]
    body = {"input_file_id": file_id, "model": "double", "id_column": "id"}
    clock = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda _: submit(service.acme, body), range(50)))
    submit_seconds = time.perf_counter() - clock
    assert all(r.status_code == 201 for r in responses), [
        r.text for r in responses if r.status_code != 201
    ]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 50

    deadline = time.monotonic() + 150
    statuses: dict[str, str] = {}
    while time.monotonic() < deadline:
        page = service.acme.get("/v1/jobs", params={"limit": 100}).json()["data"]
        statuses = {j["id"]: j["status"] for j in page if j["id"] in ids}
        if len(statuses) == 50 and all(s in FINISHED for s in statuses.values()):
            break
        time.sleep(0.5)
    total_seconds = time.perf_counter() - clock
    assert sorted(set(statuses.values())) == ["succeeded"], statuses
    figures = (
        f"50 submissions in {submit_seconds:.2f} s ({50 / submit_seconds:.0f}/s); "
        f"all 50 jobs done {total_seconds:.1f} s after the first "
        f"(max_concurrent_jobs = 2, one worker each, 2 cores)"
    )
    record_property("load", figures)
    first = service.acme.get(f"/v1/jobs/{sorted(ids)[0]}/results").text.splitlines()
    assert len(first) == 20


def test_one_idempotency_key_makes_one_job(service: Service) -> None:
    file_id = upload(service.acme, jsonl([{"id": 1, "x": 1.0}]))["id"]
    body = {"input_file_id": file_id, "model": "double"}
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda _: submit(service.acme, body, key="nightly-1"), range(50)))
    assert {r.status_code for r in responses} == {201}
    assert len({r.json()["id"] for r in responses}) == 1
    with closing(sqlite3.connect(service.site.store.removeprefix("sqlite:///"))) as db:
        count = db.execute(
            "SELECT COUNT(*) FROM thresher_jobs WHERE idempotency_key = 'nightly-1'"
        ).fetchone()[0]
    assert count == 1
    # The key is the tenant's own: another tenant's same key is another job.
    other_file = upload(service.globex, jsonl([{"id": 1, "x": 1.0}]))["id"]
    other = submit(service.globex, {**body, "input_file_id": other_file}, key="nightly-1")
    assert other.json()["id"] != responses[0].json()["id"]


def test_a_tenant_sees_nothing_of_another(service: Service) -> None:
    file_id = upload(service.acme, jsonl([{"id": 1, "x": 1.0}]))["id"]
    job_id = submit(service.acme, {"input_file_id": file_id, "model": "double"}).json()["id"]
    wait_for_job(service.acme, job_id)
    for path in (
        f"/v1/files/{file_id}",
        f"/v1/jobs/{job_id}",
        f"/v1/jobs/{job_id}/results",
        f"/v1/jobs/{job_id}/errors",
    ):
        response = service.globex.get(path)
        assert response.status_code == 404, (path, response.text)
    assert service.globex.post(f"/v1/jobs/{job_id}/cancel").status_code == 404
    borrowed = submit(service.globex, {"input_file_id": file_id, "model": "double"})
    assert borrowed.status_code == 404
    assert job_id not in {j["id"] for j in service.globex.get("/v1/jobs").json()["data"]}
    with service.server.client() as anonymous, service.server.client("thr_forged") as forged:
        assert anonymous.get(f"/v1/jobs/{job_id}").status_code == 401
        assert forged.get("/v1/jobs").status_code == 401


def test_server_side_paths_stay_inside_the_allowed_roots(service: Service) -> None:
    site = service.site
    outside = site.root / "secret.jsonl"
    outside.write_bytes(jsonl([{"id": 1, "x": 1.0}]))
    inside = site.shared / "inside.jsonl"
    inside.write_bytes(jsonl([{"id": 1, "x": 1.0}, {"id": 2, "x": 2.0}]))
    (site.shared / "link.jsonl").symlink_to(outside)
    (site.shared / "linked-dir").mkdir()
    (site.shared / "linked-dir" / "out.jsonl").symlink_to(outside)

    refused = {
        "/etc/passwd": 403,
        str(outside): 403,
        f"{site.shared}/../secret.jsonl": 403,
        str(site.shared / "link.jsonl"): 403,
        str(site.shared / "linked-dir"): 403,
        f"{site.shared}/linked-dir/*.jsonl": 403,
        f"file://{outside}": 403,
        "shared/inside.jsonl": 400,
        str(site.shared / "missing.jsonl"): 400,
    }
    for uri, status in refused.items():
        response = submit(service.acme, {"source": {"uri": uri}, "model": "double"})
        assert response.status_code == status, (uri, response.text)
        assert "source.uri" in response.json()["detail"], response.text
    assert (
        "outside the paths this server may read"
        in submit(service.acme, {"source": {"uri": str(outside)}, "model": "double"}).json()[
            "detail"
        ]
    )

    allowed = submit(service.acme, {"source": {"uri": str(inside)}, "model": "double"})
    assert allowed.status_code == 201, allowed.text
    assert wait_for_job(service.acme, allowed.json()["id"])["request_counts"]["completed"] == 2


def test_a_gzip_csv_upload_is_read_decompressed(service: Service) -> None:
    """`.csv.gz` uploads were once stored as `.csv` and read as bytes of garbage."""
    text = "id,x\n" + "".join(f"{i},{i}.5\n" for i in range(10))
    for name in ("scores.csv.gz", "misnamed.csv"):  # the bytes decide, not the name
        file_id = upload(service.acme, gzip.compress(text.encode()), name)["id"]
        body = {"input_file_id": file_id, "model": "double", "id_column": "id"}
        response = submit(service.acme, body)
        assert response.status_code == 201, response.text
        job = wait_for_job(service.acme, response.json()["id"])
        assert job["status"] == "succeeded", job
        lines = service.acme.get(f"/v1/jobs/{job['id']}/results").text.splitlines()
        assert [json.loads(line)["prediction"] for line in lines] == [
            2 * (i + 0.5) for i in range(10)
        ]
    parquet_gz = upload_refused = service.acme.post(
        "/v1/files", files={"file": ("t.parquet", gzip.compress(b"PAR1...."))}
    )
    assert parquet_gz.status_code == 422 and "compressed Parquet" in upload_refused.text


def test_an_oversized_upload_is_refused_and_leaves_nothing(service: Service) -> None:
    uploads = service.site.data / "uploads"
    before = sorted(uploads.iterdir())
    limit = service.site.max_upload_bytes
    for size in (limit + 1_000, limit * 20):  # cut off mid-stream; refused from its length
        response = service.acme.post("/v1/files", files={"file": ("big.jsonl", b"x" * size)})
        assert response.status_code == 413, response.text
        assert f"{limit:,} bytes" in response.json()["detail"]
    assert sorted(uploads.iterdir()) == before


def test_an_unknown_model_or_field_is_named(service: Service) -> None:
    file_id = upload(service.acme, jsonl([{"id": 1, "x": 1.0}]))["id"]
    response = submit(service.acme, {"input_file_id": file_id, "model": "gpt-7"})
    assert response.status_code == 422
    assert "'gpt-7'" in str(response.json()["detail"]) and "double" in str(response.json())
    typo = submit(service.acme, {"input_file_id": file_id, "model": "double", "sink": {"uri": "/"}})
    assert typo.status_code == 422 and "sink" in typo.text


def test_health_metrics_openapi_paging_and_cancel(service: Service) -> None:
    with service.server.client() as anonymous:
        assert anonymous.get("/healthz").json() == {"status": "ok"}
        assert anonymous.get("/metrics").status_code == 401  # metrics_public = false
        document = anonymous.get("/openapi.json").json()
    assert document["info"]["title"] == "thresher"
    assert {"/v1/files", "/v1/jobs", "/v1/jobs/{job_id}/results", "/metrics"} <= set(
        document["paths"]
    )
    metrics = service.acme.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert 'thresher_jobs{state="succeeded",tenant="acme"}' in metrics.text
    assert "thresher_rows_out_total" in metrics.text

    (service.site.shared / "parts").mkdir(exist_ok=True)
    for i in range(3):
        (service.site.shared / "parts" / f"{i}.jsonl").write_bytes(jsonl([{"id": i, "x": 1.0}]))
    slow = submit(
        service.acme,
        {"source": {"uri": str(service.site.shared / "parts"), "format": "jsonl"}, "model": "slow"},
    )
    assert slow.status_code == 201, slow.text
    cancelled = service.acme.post(f"/v1/jobs/{slow.json()['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert wait_for_job(service.acme, slow.json()["id"])["status"] == "cancelled"
    assert service.acme.get(f"/v1/jobs/{slow.json()['id']}/results").status_code == 409

    file_id = upload(service.acme, jsonl([{"id": 1, "x": 1.0}]))["id"]
    for _ in range(2):
        submit(service.acme, {"input_file_id": file_id, "model": "double"})
    first = service.acme.get("/v1/jobs", params={"limit": 2}).json()
    second = service.acme.get("/v1/jobs", params={"limit": 2, "after": first["last_id"]}).json()
    assert first["has_more"] and len(first["data"]) == 2
    assert not {j["id"] for j in first["data"]} & {j["id"] for j in second["data"]}
    assert first["data"][0]["created_at"] >= second["data"][0]["created_at"]


def test_a_job_survives_the_server_being_killed_mid_job(tmp_path: Path) -> None:
    site = ServiceSite(tmp_path, slow_delay=0.7)
    token = site.token("acme")
    folder = site.shared / "nightly"
    folder.mkdir()
    rows = {i: float(i) for i in range(40)}
    for shard in range(4):  # one shard per file
        part = [{"id": i, "x": rows[i]} for i in range(shard * 10, shard * 10 + 10)]
        (folder / f"part-{shard}.jsonl").write_bytes(jsonl(part))

    server = Server(site)
    with server.client(token) as client:
        job_id = submit(
            client,
            {"source": {"uri": str(folder), "format": "jsonl"}, "model": "slow", "id_column": "id"},
        ).json()["id"]
        deadline = time.monotonic() + 30
        while client.get(f"/v1/jobs/{job_id}").json()["progress"]["shards_done"] < 1:
            assert time.monotonic() < deadline, "the job never got going"
            time.sleep(0.05)
    server.kill()
    store = site.store.removeprefix("sqlite:///")
    with closing(sqlite3.connect(store)) as db:
        (state,) = db.execute("SELECT state FROM thresher_jobs WHERE id = ?", (job_id,)).fetchone()
        done = {i for (i,) in db.execute(_DONE_SHARDS, (job_id,))}
    assert state == "running" and 1 <= len(done) < 4, (state, done)  # killed mid-job

    restarted = Server(site)
    try:
        with restarted.client(token) as client:
            job = wait_for_job(client, job_id, timeout=60)
            assert job["status"] == "succeeded", job
            assert job["request_counts"] == {"total": 40, "completed": 40, "failed": 0}
            got = [
                json.loads(line)
                for line in client.get(f"/v1/jobs/{job_id}/results").text.splitlines()
            ]
            jobs = client.get("/v1/jobs").json()["data"]
    finally:
        restarted.stop()
    assert [r["id"] for r in got] == list(range(40))  # every row once, in input order
    assert [r["prediction"] for r in got] == [2.0 * rows[i] for i in range(40)]
    assert [j["id"] for j in jobs] == [job_id]
    assert "resuming it" in restarted.log.read_text()
    with closing(sqlite3.connect(store)) as db:
        attempts = dict(db.execute(_ATTEMPTS, (job_id,)).fetchall())
    assert sorted(attempts) == [0, 1, 2, 3]
    assert all(attempts[i] == 1 for i in done)  # shards committed before the kill: not redone


_DONE_SHARDS = "SELECT idx FROM thresher_shards WHERE job_id = ? AND state = 'done'"
_ATTEMPTS = "SELECT idx, COUNT(*) FROM thresher_attempts WHERE job_id = ? GROUP BY idx"


def test_the_servers_files_are_its_users_alone(service: Service) -> None:
    file_id = upload(service.acme, jsonl([{"id": 1, "x": 1.0}, {"id": 2, "x": -1.0}]))["id"]
    submitted = submit(service.acme, {"input_file_id": file_id, "model": "double"})
    job = wait_for_job(service.acme, submitted.json()["id"])
    assert job["status"] == "succeeded", job
    store_file = Path(service.site.store.removeprefix("sqlite:///"))
    made = [service.site.data, *service.site.data.rglob("*"), store_file]
    assert any(p.name.startswith("part-") for p in made) and any(
        p.parent.name == "_errors" for p in made
    )
    shared = {str(p): oct(p.stat().st_mode & 0o777) for p in made if p.stat().st_mode & 0o077}
    assert shared == {}


def trickle(server: Server, head: bytes, body: bytes, every: float, within: float) -> bytes:
    """Send `head` at once and `body` a byte every `every` seconds, on a raw socket; what
    the server answers (b"" if nothing within `within` seconds)."""
    answer = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=every) as sock:
        sock.sendall(head)
        deadline = time.monotonic() + within
        for byte in body:
            if time.monotonic() > deadline or b"\r\n\r\n" in answer:
                break
            try:
                sock.sendall(bytes([byte]))
                answer += sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # the server closed the connection
                break
    return answer


def test_a_body_that_trickles_in_is_cut_off_with_408_and_leaves_nothing(tmp_path: Path) -> None:
    site = ServiceSite(tmp_path, settings="body_timeout = 1\nbody_min_rate = 1000")
    token = site.token("acme")
    server = Server(site)
    try:
        part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n'
        body = part + b'{"id": 1, "x": 1.0}\n' * 100 + b"\r\n--b--\r\n"
        for path, kind, sent in (
            ("/v1/files", "multipart/form-data; boundary=b", body),
            ("/v1/jobs", "application/json", b'{"model": "double", "name": "' + b"x" * 2000),
        ):
            head = (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: {kind}\r\nContent-Length: {len(sent)}\r\n\r\n"
            ).encode()
            started = time.monotonic()
            answer = trickle(server, head, sent, every=0.1, within=8)
            assert answer.startswith(b"HTTP/1.1 408"), (path, answer)
            assert time.monotonic() - started < 6
        uploads = site.data / "uploads"
        assert not uploads.exists() or list(uploads.iterdir()) == []
        with server.client(token) as client:
            assert client.get("/v1/jobs").json()["data"] == []
    finally:
        server.stop()
