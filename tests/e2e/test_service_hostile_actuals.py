"""A tenant's actuals file cannot stop a real `thresher serve`, nor fill its memory.

An uploaded part of actuals was once parsed by pyarrow inside the server process: a JSON
line nested 20,000 deep (a 40 KB upload) segfaulted the whole server, and a 100 KB gzip
of five million rows took it from 117 to 478 MB. Now the file is read and joined in a
child process (`service/background/isolated.py`), streamed, within `upload_max_rows`
and `upload_max_decompressed_bytes`: these tests send both files, and a reader that
segfaults for real, and check the server answers each with a 4xx and goes on serving.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LINE = b'{"id": 1, "label": 2.0}\n'


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, httpx.Client]]:
    site = ServiceSite(tmp_path_factory.mktemp("hostile-actuals"), max_upload_bytes=2_000_000)
    token = site.token("acme")
    server = Server(site)
    with server.client(token) as client:
        yield server, client
    server.stop()


def finished_job(client: httpx.Client) -> str:
    lines = b"".join(json.dumps({"id": i, "x": i}).encode() + b"\n" for i in range(5))
    uploaded = client.post("/v1/files", files={"file": ("in.jsonl", lines)})
    assert uploaded.status_code == 201, uploaded.text
    body = {"input_file_id": uploaded.json()["id"], "model": "double", "id_column": "id"}
    job = wait_for_job(client, client.post("/v1/jobs", json=body).json()["id"])
    assert job["status"] == "succeeded", job
    return str(job["id"])


def upload(client: httpx.Client, name: str, data: bytes) -> str:
    uploaded = client.post("/v1/files", files={"file": (name, data)})
    assert uploaded.status_code == 201, uploaded.text
    return str(uploaded.json()["id"])


def still_serving(client: httpx.Client, job: str) -> None:
    """`/healthz` answers, and so does another tenant request that writes."""
    assert client.get("/healthz").status_code == 200
    records = {"records": [{"id": 0, "label": 0.0}]}
    added = client.post(f"/v1/jobs/{job}/actuals", json=records)
    assert added.status_code == 201, added.text


def peak_rss_kib(pid: int) -> int:
    """The most memory the process has held at once so far (`VmHWM`), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def test_a_part_nested_20000_deep_is_a_422_and_the_server_lives_on(
    served: tuple[Server, httpx.Client],
) -> None:
    server, client = served
    job = finished_job(client)
    deep = b'{"id": 1, "label": ' + b"[" * 20_000 + b"]" * 20_000 + b"}\n"  # 40 KB
    file_id = upload(client, "deep.jsonl", deep)
    try:
        answer = client.post(f"/v1/jobs/{job}/actuals", json={"file_id": file_id})
    except httpx.TransportError as exc:
        pytest.fail(f"the server died reading the part ({exc}); rc {server.process.poll()}")
    assert answer.status_code == 422, answer.text
    assert "deep.jsonl line 1: cannot read it as jsonl: nested deeper than 100 levels" in (
        answer.text
    )
    still_serving(client, job)
    assert server.process.poll() is None


def test_a_small_gzip_of_millions_of_rows_is_a_413_and_server_memory_stays_flat(
    served: tuple[Server, httpx.Client],
) -> None:
    server, client = served
    job = finished_job(client)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    block = LINE * 100_000
    bomb = b"".join(packer.compress(block) for _ in range(60)) + packer.flush()
    assert len(bomb) < 400_000  # 6,000,000 rows, 144 MB once decompressed
    file_id = upload(client, "bomb.jsonl.gz", bomb)
    before = peak_rss_kib(server.process.pid)
    answer = client.post(f"/v1/jobs/{job}/actuals", json={"file_id": file_id}, timeout=300)
    after = peak_rss_kib(server.process.pid)
    assert after - before < 64 * 1024, f"the server's peak grew from {before} to {after} KiB"
    assert answer.status_code == 413, answer.text
    assert "bomb.jsonl.gz: more than 5,000,000 rows" in answer.text
    assert "(upload_max_rows)" in answer.text
    still_serving(client, job)


def test_a_reader_that_segfaults_is_a_422_and_the_server_lives_on(tmp_path: Path) -> None:
    site = ServiceSite(tmp_path)
    token = site.token("acme")
    server = Server(site, env={"THRESHER_FAULT": "read_upload", "THRESHER_FAULT_SIGNAL": "SIGSEGV"})
    try:
        with server.client(token) as client:
            job = finished_job(client)
            file_id = upload(client, "labels.csv", b"id,label\n0,1.0\n")
            answer = client.post(f"/v1/jobs/{job}/actuals", json={"file_id": file_id})
            assert answer.status_code == 422, answer.text
            assert "labels.csv: the file could not be read (its reader was killed by signal 11" in (
                answer.text
            )
            still_serving(client, job)
    finally:
        server.stop()
    assert server.process.returncode in (0, -15), server.log.read_text()
