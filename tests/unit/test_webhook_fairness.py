"""Fair sharing of the webhook threads: a wall-clock deadline on each attempt (a receiver
that drips its answer a byte at a time is cut off at it, and the delivery is retried),
each tenant's share of the delivery threads, and an endpoint test that is a success only
when the receiver answers 2xx."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from fastapi.testclient import TestClient

from receivers import drip_receiver
from thresher.notify.attempts import post_webhook, webhook_client
from thresher.notify.delivery import Delivery, RetryingDispatcher
from thresher.notify.sender import RetryPolicy, WebhookSender, WebhookSettings
from thresher.service.app import create_app
from thresher.service.config import ServerConfig, prepare
from thresher.service.policies.auth import create_token
from thresher.service.state import ServiceState
from thresher.spec import JobSpec
from thresher.store import JobState, Store, open_store

pytestmark = pytest.mark.unit

SECRET = "s3cret"
FAST = RetryPolicy(
    first=0.05, longest=0.4, window=30.0, jitter=0.0
)  # each try takes its 1 s deadline


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(f"sqlite:///{tmp_path / 'store.db'}")


def ended_job(store: Store, webhook: str) -> str:
    job_id = f"job-{time.monotonic_ns()}"
    spec = JobSpec.model_validate(
        {
            "model": {"kind": "python", "uri": "model.py"},
            "source": {"uri": "in.csv", "id_column": "id"},
            "sink": {"uri": "out/"},
            "notify": {"webhook": webhook},
        }
    )
    store.create_job(job_id, "hooked", spec, {"shards": [{}]})
    store.finish(job_id, JobState.SUCCEEDED, None, None)
    return job_id


def test_a_dripping_answer_is_cut_off_at_the_deadline() -> None:
    with drip_receiver(0.2, 8.0) as drip, webhook_client() as client:
        started = time.monotonic()
        with pytest.raises(httpx.TimeoutException, match="deadline"):
            post_webhook(client, drip.url(), b"{}", {}, allow_private=True, deadline=0.6)
        took = time.monotonic() - started
    assert 0.6 <= took < 1.2


def test_a_dripping_receiver_gets_attempts_that_end_at_the_deadline_and_are_retried(
    store: Store,
) -> None:
    settings = WebhookSettings(SECRET, allow_private=True, retry=FAST, timeout=1.0)
    with drip_receiver(0.2, 8.0) as drip:
        sender = WebhookSender(store, settings)
        job_id = ended_job(store, drip.url())
        try:
            sender.job_finished(store.job(job_id))
            deadline = time.monotonic() + 4.0  # four deadlines' worth, half a drip
            while time.monotonic() < deadline and drip.opened < 3:
                time.sleep(0.05)
            (row,) = store.deliveries.of_job(job_id)
        finally:
            sender.close()
        assert drip.opened >= 3, f"only {drip.opened} attempts in 4 s"
        assert row["state"] == "pending" and row["attempts"] >= 2
        assert "deadline" in row["last_error"]
        time.sleep(0.3)  # the drip notices the last hang-up at its next byte
        assert drip.closed and max(drip.closed) < 1.6


def test_one_tenants_stuck_deliveries_take_only_its_share_of_the_threads() -> None:
    release, running, peak = threading.Event(), [0], [0]
    others: list[float] = []
    lock = threading.Lock()

    def attempt(delivery: Delivery) -> float | None:
        if delivery.tenant == "globex":
            others.append(time.monotonic())
            return None
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(10)
        with lock:
            running[0] -= 1
        return None

    dispatcher = RetryingDispatcher(attempt, workers=4, per_tenant=2)
    try:
        for i in range(6):
            dispatcher.submit(Delivery(f"job-{i}", "job.completed", "u", "{}", tenant="acme"))
        time.sleep(0.2)
        sent = time.monotonic()
        dispatcher.submit(Delivery("theirs", "job.completed", "u", "{}", tenant="globex"))
        time.sleep(0.5)
        assert others and others[0] - sent < 0.3, "globex waited for acme's receiver"
        assert peak[0] == 2
        release.set()
        time.sleep(0.5)
        assert running[0] == 0 and peak[0] == 2  # the parked ones ran, two at a time
    finally:
        release.set()
        dispatcher.close()


@contextmanager
def answering(status: int) -> Iterator[str]:
    """A receiver on 127.0.0.1 answering every POST with `status`; its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(status)
            self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(("status", "success"), [(200, True), (204, True), (302, False),
                                                 (404, False), (500, False)])  # fmt: skip
def test_an_endpoint_test_is_a_success_only_for_a_2xx(
    tmp_path: Path, status: int, success: bool
) -> None:
    config = prepare(ServerConfig(data_dir=tmp_path / "data", webhook_allow_private=True))
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    state = ServiceState(store=store, config=config, data_dir=config.data_dir)
    auth = {"Authorization": f"Bearer {create_token(store, 'acme')}"}
    with answering(status) as url, TestClient(create_app(state, background=False)) as client:
        made = client.post(
            "/v1/webhook_endpoints",
            json={"name": "n", "url": url, "event_types": ["batch.completed"]},
            headers=auth,
        )
        assert made.status_code == 200, made.text
        tested = client.post(
            f"/v1/webhook_endpoints/{made.json()['id']}/test",
            json={"event_type": "batch.completed"},
            headers=auth,
        )
    assert tested.status_code == 200, tested.text
    assert (tested.json()["status_code"], tested.json()["success"]) == (status, success)
