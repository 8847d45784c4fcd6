"""A server killed between a job's (or a batch's) end and its webhooks: the next server
on the store sends them, once (`store.announced`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from .servers import Inbox, Server, ServiceSite, wait_for_job, webhook_inbox
from .test_openai_batches import request, site_with_models, upload

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    with webhook_inbox() as box:
        yield box


def died_of_the_fault(server: Server, timeout: float = 240) -> None:
    """Wait for the server to reach its THRESHER_FAULT point and die there (SIGKILL)."""
    assert server.process.wait(timeout) == -9, server.log.read_text()


def test_a_job_whose_server_died_before_its_webhook_gets_it_from_the_next(
    tmp_path: Path, inbox: Inbox
) -> None:
    site = ServiceSite(tmp_path, settings="webhook_allow_private = true")
    (site.shared / "in.jsonl").write_text("".join(f'{{"id": {i}, "x": {i}}}\n' for i in range(5)))
    token = site.token("acme")
    server = Server(site, env={"THRESHER_FAULT": "job_ended"})
    body = {
        "source": {"uri": str(site.shared / "in.jsonl"), "format": "jsonl"},
        "model": "double",
        "id_column": "id",
        "notify": {"webhook": inbox.url()},
    }
    try:
        with server.client(token) as client:
            job_id = client.post("/v1/jobs", json=body).json()["id"]
        died_of_the_fault(server)
    finally:
        server.kill()
    assert inbox.got == []  # the job ended; its webhook was never recorded

    again = Server(site)
    try:
        with again.client(token) as client:
            assert wait_for_job(client, job_id)["status"] == "succeeded"
        (got,) = inbox.wait(1)
        event = json.loads(got.body)
        assert (event["event"], event["job_id"], event["status"]) == (
            "job.completed",
            job_id,
            "succeeded",
        )
        time.sleep(1.5)  # another look of the scheduler: nothing more
        assert len(inbox.got) == 1
    finally:
        again.stop()


def test_a_batch_whose_server_died_before_its_event_gets_it_from_the_next_once(
    tmp_path: Path, inbox: Inbox
) -> None:
    site = site_with_models(tmp_path, "webhook_allow_private = true")
    token = site.token("acme")
    server = Server(site, env={"THRESHER_FAULT": "batch_ended"})
    acme = OpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0)
    try:
        hook = acme.webhooks.create(
            event_types=["batch.completed"], name="nightly", url=inbox.url()
        )
        lines = [request(f"r{i}", {"model": "minilm", "input": f"text {i}"}) for i in range(3)]
        file_id = upload(acme, lines).id
        batch = acme.batches.create(
            input_file_id=file_id, endpoint="/v1/embeddings", completion_window="24h"
        )
        died_of_the_fault(server)
    finally:
        server.kill()
    assert inbox.got == []

    again = Server(site)
    try:
        acme = OpenAI(base_url=f"{again.url}/v1", api_key=token, max_retries=0)
        assert acme.batches.retrieve(batch.id).status == "completed"
        (got,) = inbox.wait(1)
        event = acme.webhooks.unwrap(got.body, got.headers, secret=hook.signing_secret)
        assert (event.type, event.data.id) == ("batch.completed", batch.id)
        time.sleep(1.5)
        assert len(inbox.got) == 1
    finally:
        again.stop()
