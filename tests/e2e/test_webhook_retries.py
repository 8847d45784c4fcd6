"""A receiver that is down gets its job's webhook once it is back, across a server
restart, signed so that the Standard Webhooks library verifies it; the delivery log and
a redelivery through the HTTP API. The clock is sped up through the retry settings."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from thresher.notify import standard_secret

from .servers import Server, ServiceSite, wait_for_job, webhook_inbox

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROWS = b'{"id": 1, "x": 1.0}\n{"id": 2, "x": 2.0}\n'
FAST = """webhook_allow_private = true
webhook_retry_first = 1.0
webhook_retry_longest = 1.0
webhook_retry_hours = 1.0"""


def test_a_receiver_down_across_a_server_restart_gets_the_event_once(tmp_path: Path) -> None:
    site = ServiceSite(tmp_path, settings=FAST)
    token = site.token("acme")
    with webhook_inbox(failing=3) as inbox:
        server = Server(site)
        with server.client(token) as client:
            file_id = client.post("/v1/files", files={"file": ("in.jsonl", ROWS)}).json()["id"]
            body = {"input_file_id": file_id, "model": "double", "id_column": "id"}
            body["notify"] = {"webhook": inbox.url()}
            job_id = client.post("/v1/jobs", json=body).json()["id"]
            assert wait_for_job(client, job_id)["status"] == "succeeded"
            inbox.wait(1)  # the first try, answered 503
        server.kill()  # the delivery is pending in the store
        restarted = Server(site)
        try:
            got = inbox.wait(4, timeout=60)  # 503, 503, 503, then 200
            time.sleep(1.5)  # nothing more comes
            with restarted.client(token) as client:
                log = client.get(f"/v1/jobs/{job_id}/webhooks").json()["data"]
        finally:
            restarted.stop()
    assert len(inbox.got) == 4
    assert len({d.headers["webhook-id"] for d in got}) == 1  # one message, retried
    (row,) = log
    assert row["state"] == "delivered" and row["last_status"] == 200
    assert row["event"] == "job.completed" and row["url"] == inbox.url()
    secret = (site.data / "webhook_secret").read_text().strip()
    event = Webhook(standard_secret(secret)).verify(got[-1].body, got[-1].headers)
    assert event["job_id"] == job_id and event == json.loads(got[-1].body)


def test_a_failed_webhook_is_sent_again_through_the_api(tmp_path: Path) -> None:
    site = ServiceSite(tmp_path, settings=FAST)
    token, other = site.token("acme"), site.token("globex")
    with webhook_inbox(status=410, failing=0) as inbox:
        server = Server(site)
        try:
            with server.client(token) as client, server.client(other) as stranger:
                file_id = client.post("/v1/files", files={"file": ("a.jsonl", ROWS)}).json()["id"]
                body = {"input_file_id": file_id, "model": "double", "id_column": "id"}
                body["notify"] = {"webhook": inbox.url()}
                job_id = client.post("/v1/jobs", json=body).json()["id"]
                wait_for_job(client, job_id)
                inbox.wait(1)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    (row,) = client.get(f"/v1/jobs/{job_id}/webhooks").json()["data"]
                    if row["state"] == "failed":
                        break
                    time.sleep(0.1)
                assert row["state"] == "failed" and row["last_status"] == 410
                assert stranger.get(f"/v1/jobs/{job_id}/webhooks").status_code == 404
                again = stranger.post(f"/v1/jobs/{job_id}/webhooks/redeliver")
                assert again.status_code == 404
                again = client.post(f"/v1/jobs/{job_id}/webhooks/redeliver")
                assert again.json() == {"redelivering": 1}
                inbox.wait(2)
        finally:
            server.stop()
    assert len(inbox.got) == 2
