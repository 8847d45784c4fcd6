"""The service end to end: a real `thresher serve` (uvicorn, scheduler, worker processes)
takes 1,000 single records, runs them as batch jobs, and answers every custom_id exactly
once; a job with `notify.webhook` POSTs a signed event to a receiver on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import pytest

from thresher.notify import verify_signature

from .servers import Inbox, webhook_inbox
from .support import THRESHER

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RECORDS = 1000
BATCH = 250
SECRET = "e2e-webhook-secret"
MODEL = """
class Doubler:
    def predict(self, batch):
        if (batch["x"] < 0).any():
            raise ValueError("negative x")
        return {"prediction": batch["x"] * 2}
"""


def x_of(i: int) -> float:
    """Every hundredth record is one the model rejects."""
    return -1.0 if i % 100 == 99 else float(i)


@dataclass
class Server:
    url: str
    token: str
    data_dir: Path
    store: Path

    def client(self) -> httpx.Client:
        auth = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.url, headers=auth, timeout=30)

    def answered(self) -> int:
        with closing(sqlite3.connect(self.store)) as db:
            row = db.execute(
                "SELECT COUNT(*) FROM thresher_requests WHERE state IN ('done', 'failed')"
            ).fetchone()
        return int(row[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path, private_store: str) -> Iterator[Server]:
    (tmp_path / "doubler.py").write_text(MODEL)
    config = tmp_path / "server.toml"
    config.write_text(
        f"""data_dir = "{tmp_path / "data"}"
max_concurrent_jobs = 2
webhook_allow_private = true
webhook_secret = "{SECRET}"

# 2,001 requests from one token in a few seconds: past the default rate, which this
# test is not about (tests/unit/test_tenant_limits.py is).
[tenant_defaults]
requests_per_second = 100000
requests_burst = 100000

[models.double]
kind = "python"
uri = "{tmp_path / "doubler.py"}:Doubler"
batch_format = "numpy"

[run]
workers = 1

[buffer.double]
max_records = {BATCH}
max_wait = 60
"""
    )
    env = {**os.environ, "THRESHER_STORE": private_store}
    made = subprocess.run(
        [str(THRESHER), "token", "create", "--tenant", "acme"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [str(THRESHER), "serve", "--config", str(config), "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, process, tmp_path / "serve.log")
        store = Path(private_store.removeprefix("sqlite:///"))
        yield Server(url, made.stdout.strip(), tmp_path / "data", store)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"thresher serve exited:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"thresher serve did not come up:\n{log.read_text()}")


@pytest.fixture
def receiver() -> Iterator[Inbox]:
    with webhook_inbox(status=204) as inbox:
        yield inbox


def test_a_thousand_buffered_requests_are_each_answered_once(server: Server) -> None:
    with server.client() as client, ThreadPoolExecutor(8) as pool:
        posted = pool.map(
            lambda i: (
                client.post(
                    "/v1/requests",
                    json={"custom_id": f"req-{i:04d}", "model": "double", "input": {"x": x_of(i)}},
                ).status_code
            ),
            range(RECORDS),
        )
        assert Counter(posted) == {202: RECORDS}
        again = client.post("/v1/requests", json={"custom_id": "req-0000", "model": "double",
                                                  "input": {"x": 1.0}})  # fmt: skip
        assert again.status_code == 409
        deadline = time.monotonic() + 240
        while server.answered() < RECORDS and time.monotonic() < deadline:
            time.sleep(0.5)
        replies = list(pool.map(lambda i: client.get(f"/v1/requests/req-{i:04d}"),
                                range(RECORDS)))  # fmt: skip
    assert Counter(reply.status_code for reply in replies) == {200: RECORDS}
    answers = [reply.json() for reply in replies]
    for i, got in enumerate(answers):
        if x_of(i) < 0:
            assert got["status"] == "failed" and got["error"]["stage"] == "predict", got
        else:
            assert got["status"] == "done" and got["output"] == {"prediction": 2 * x_of(i)}, got
    jobs = {got["job_id"] for got in answers}
    assert len(jobs) == RECORDS // BATCH
    assert Counter(_ids_in_outputs(server.data_dir, jobs)) == {
        f"req-{i:04d}": 1 for i in range(RECORDS)
    }
    batches = sorted((server.data_dir / "buffer").glob("*.jsonl"))
    assert [len(p.read_text().splitlines()) for p in batches] == [BATCH] * (RECORDS // BATCH)


def _ids_in_outputs(data_dir: Path, jobs: set[str]) -> list[str]:
    """Every custom_id in the jobs' result parts and error files: each must be in one."""
    ids = []
    for job_id in jobs:
        out = data_dir / "outputs" / job_id
        assert (out / "_SUCCESS").exists()
        for part in [*out.glob("part-*.jsonl"), *(out / "_errors").glob("part-*.jsonl")]:
            for line in part.read_text().splitlines():
                row = json.loads(line)
                ids.append(row.get("custom_id", row.get("id")))
    return ids


def test_a_finished_job_posts_a_signed_webhook(
    server: Server, receiver: Inbox, tmp_path: Path
) -> None:
    rows = "".join(json.dumps({"custom_id": f"r{i}", "x": x_of(i)}) + "\n" for i in range(99, 120))
    with server.client() as client:
        upload = client.post("/v1/files", files={"file": ("rows.jsonl", rows.encode())})
        assert upload.status_code == 201, upload.text
        submitted = client.post(
            "/v1/jobs",
            json={"input_file_id": upload.json()["id"], "model": "double",
                  "id_column": "custom_id",
                  "notify": {"webhook": receiver.url("/thresher?src=e2e")}},
        )  # fmt: skip
        assert submitted.status_code == 201, submitted.text
    (got,) = receiver.wait(1)
    assert got.path == "/thresher?src=e2e"
    assert verify_signature(SECRET, dict(got.headers), got.body)
    event = json.loads(got.body)
    assert event["event"] == "job.completed" and event["job_id"] == submitted.json()["id"]
    assert event["status"] == "succeeded"
    assert event["request_counts"] == {"total": 21, "completed": 20, "failed": 1}
