"""A real `thresher serve` whose tenant `acme` points its webhooks at a receiver that drips
its answer one byte at a time (a raw socket server on 127.0.0.1): acme's attempts end at
the server's `webhook_timeout` and are retried, `globex`'s job event arrives within
seconds all the same, and globex's endpoint test is not refused because of acme's."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from receivers import Drip, drip_receiver

from .servers import Server, ServiceSite, wait_for_job, webhook_inbox

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DEADLINE = 2.0


def wait_until(done: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def job_body(site: ServiceSite, webhook: str) -> dict[str, Any]:
    return {
        "source": {"uri": str(site.shared / "in.jsonl"), "format": "jsonl"},
        "model": "double",
        "id_column": "id",
        "notify": {"webhook": webhook},
    }


def test_a_tenants_dripping_receiver_delays_neither_another_tenants_webhooks_nor_tests(
    tmp_path: Path,
) -> None:
    settings = f"webhook_allow_private = true\nwebhook_timeout = {DEADLINE}"
    site = ServiceSite(tmp_path, settings=settings)
    (site.shared / "in.jsonl").write_text("".join(f'{{"id": {i}, "x": {i}}}\n' for i in range(5)))
    tokens = {tenant: site.token(tenant) for tenant in ("acme", "globex")}
    with drip_receiver(0.5, 40.0) as drip, webhook_inbox() as inbox:
        server = Server(site)
        try:
            with server.client(tokens["acme"]) as acme, server.client(tokens["globex"]) as globex:
                stuck = [
                    acme.post("/v1/jobs", json=job_body(site, drip.url("/jobs"))).json()["id"]
                    for _ in range(4)  # as many as the delivery threads were
                ]
                for job_id in stuck:
                    wait_for_job(acme, job_id)
                wait_until(lambda: drip.count("/jobs") >= 2, 10, "acme's webhooks never left")

                theirs = globex.post("/v1/jobs", json=job_body(site, inbox.url()))
                wait_for_job(globex, theirs.json()["id"])
                ended = time.monotonic()
                (got,) = inbox.wait(1, timeout=10)
                assert time.monotonic() - ended < 5, "globex's webhook waited for acme's"
                assert json.loads(got.body)["job_id"] == theirs.json()["id"]

                # acme's attempts end at the deadline, and are tried again later
                wait_until(lambda: drip.count("/jobs") > 4, 15, "acme's were not retried")
                wait_until(lambda: drip.closed, 5, "the server never hung up on the drip")
                assert max(drip.closed) < DEADLINE + 1.0

                _endpoint_tests(acme, globex, drip, inbox.url("/tested"))
        finally:
            server.stop()


def _endpoint_tests(acme: httpx.Client, globex: httpx.Client, drip: Drip, inbox_url: str) -> None:
    """acme tests its dripping endpoint four times at once; globex's test meanwhile is
    answered, not refused for want of slots."""
    made = {"name": "n", "event_types": ["batch.completed"]}
    slow = acme.post("/v1/webhook_endpoints", json={**made, "url": drip.url("/test")}).json()
    fine = globex.post("/v1/webhook_endpoints", json={**made, "url": inbox_url}).json()
    test = {"event_type": "batch.completed"}
    answers: list[int] = []

    def try_slow() -> None:
        answers.append(acme.post(f"/v1/webhook_endpoints/{slow['id']}/test", json=test).status_code)

    threads = [threading.Thread(target=try_slow) for _ in range(4)]
    for thread in threads:
        thread.start()
    wait_until(lambda: drip.count("/test") >= 2, 10, "acme's tests never reached the drip")
    tested = globex.post(f"/v1/webhook_endpoints/{fine['id']}/test", json=test)
    for thread in threads:
        thread.join()
    assert tested.status_code == 200, tested.text
    assert tested.json()["success"] is True and tested.json()["status_code"] == 200
    assert sorted(answers) == [400, 400, 429, 429]  # acme's own share: two at once
