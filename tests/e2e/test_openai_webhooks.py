"""Batch events through the official `openai` client, unchanged but for `base_url`: a
tenant's webhook endpoint (create, test, list, retrieve, update, rotate, delete) gets a
signed `batch.completed` and `batch.failed` when its batches end, and the client's own
`webhooks.unwrap` checks each signature and parses the event."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from .servers import Inbox, Server, webhook_inbox
from .test_openai_batches import request, site_with_models, upload, wait_batch

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    with webhook_inbox() as box:
        yield box


def test_a_tenants_endpoint_gets_its_batch_events_signed_as_openai_signs_them(
    tmp_path: Path, inbox: Inbox
) -> None:
    url, box = inbox.url(), inbox
    site = site_with_models(tmp_path, "webhook_allow_private = true")
    server = Server(site)
    try:
        acme, globex = (
            OpenAI(base_url=f"{server.url}/v1", api_key=site.token(t), max_retries=0)
            for t in ("acme", "globex")
        )
        hook = acme.webhooks.create(
            event_types=["batch.completed", "batch.failed"], name="nightly", url=url
        )
        assert hook.signing_secret.startswith("whsec_") and hook.object == "webhook_endpoint"
        tested = acme.webhooks.test(hook.id, event_type="batch.completed")
        assert (tested.status_code, tested.webhook_endpoint_id) == (200, hook.id)
        (first,) = box.wait(1)
        sample = acme.webhooks.unwrap(first.body, first.headers, secret=hook.signing_secret)
        assert sample.type == "batch.completed"

        good = [request("a", {"model": "minilm", "input": "x"})]
        made = {
            name: acme.batches.create(
                input_file_id=upload(acme, lines).id,
                endpoint="/v1/embeddings",
                completion_window="24h",
            )
            for name, lines in (("good", good), ("empty", [""]))
        }
        ended = {name: wait_batch(acme, b.id).status for name, b in made.items()}
        assert ended == {"good": "completed", "empty": "failed"}
        events = [
            acme.webhooks.unwrap(got.body, got.headers, secret=hook.signing_secret)
            for got in box.wait(3)[1:]
        ]
        assert {(e.type, e.data.id) for e in events} == {
            ("batch.completed", made["good"].id),
            ("batch.failed", made["empty"].id),
        }
        with pytest.raises(openai.InvalidWebhookSignatureError):
            acme.webhooks.unwrap(box.got[1].body, box.got[1].headers, secret="whsec_" + "A" * 44)

        assert [h.id for h in acme.webhooks.list()] == [hook.id]
        renamed = acme.webhooks.update(hook.id, name="renamed")
        assert renamed.name == "renamed" and renamed.url == url
        assert acme.webhooks.retrieve(hook.id).event_types == ["batch.completed", "batch.failed"]
        rotated = acme.webhooks.rotate_secret(hook.id, keep_old_secret_active_for_24_hours=True)
        assert rotated.signing_secret != hook.signing_secret
        acme.webhooks.test(hook.id, event_type="batch.failed")
        rotated_test = box.wait(4)[3]
        for secret in (rotated.signing_secret, hook.signing_secret):  # both, for 24 hours
            event = acme.webhooks.unwrap(rotated_test.body, rotated_test.headers, secret=secret)
            assert event.type == "batch.failed"

        with pytest.raises(openai.NotFoundError):
            globex.webhooks.retrieve(hook.id)
        with pytest.raises(openai.BadRequestError) as refused:
            acme.webhooks.create(event_types=["response.completed"], name="x", url=url)
        assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "event_types"
        with pytest.raises(openai.BadRequestError):
            acme.webhooks.create(event_types=["batch.failed"], name="x", url="ftp://example.com/")
        assert acme.webhooks.delete(hook.id).deleted is True
        with pytest.raises(openai.NotFoundError):
            acme.webhooks.retrieve(hook.id)
        time.sleep(0.5)
        assert len(box.got) == 4  # no stray deliveries
    finally:
        server.stop()
