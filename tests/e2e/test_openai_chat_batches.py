"""A chat-completions batch through the official `openai` client against a real
`thresher serve`, answered by a `kind = "llm"` model (the tiny causal LM made in the
tests): greedy answers equal the adapter's own, in OpenAI's body shapes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from .servers import Server, ServiceSite
from .test_openai_batches import request, upload, wait_batch

openai = pytest.importorskip("openai")
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.usefixtures("hf_offline")]

QUESTIONS = ["hello world", "how are you today?", "the quick brown fox"]


def test_a_chat_batch_is_answered_by_an_llm_model(
    tmp_path: Path, tiny_causal_lm: Callable[[], Path]
) -> None:
    from thresher.models import LoadContext, load_model
    from thresher.spec import ModelSection

    folder = tiny_causal_lm()
    settings = f"""
[models.tiny-chat]
kind = "llm"
uri = {json.dumps(str(folder))}
options = {{ max_tokens = 6, device = "cpu" }}
"""
    server = Server(ServiceSite(tmp_path, max_upload_bytes=1_000_000, settings=settings))
    try:
        client = openai.OpenAI(
            base_url=f"{server.url}/v1", api_key=server.site.token("acme"), max_retries=0
        )
        chats = [[{"role": "user", "content": q}] for q in QUESTIONS]
        lines = [
            request(f"q{i}", {"model": "tiny-chat", "messages": m}, url="/v1/chat/completions")
            for i, m in enumerate(chats)
        ]
        lines.append(
            request(
                "short",
                {"model": "tiny-chat", "messages": chats[0], "max_completion_tokens": 2},
                url="/v1/chat/completions",
            )
        )
        batch = client.batches.create(
            input_file_id=upload(client, lines).id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        done = wait_batch(client, batch.id)
        assert done.status == "completed", done
        text = client.files.content(done.output_file_id).text
        answers = {
            a["custom_id"]: a["response"]["body"] for a in map(json.loads, text.splitlines())
        }
    finally:
        server.stop()
    spec = ModelSection(
        kind="llm",
        uri=str(folder),
        options={"max_tokens": 6, "device": "cpu", "messages_column": "m"},
    )
    direct = load_model(spec, LoadContext(features=("m",))).predict(
        pa.table({"m": [json.dumps(m) for m in chats]})
    )
    for i, body in enumerate(answers[f"q{i}"] for i in range(len(QUESTIONS))):
        assert body["object"] == "chat.completion"
        (choice,) = body["choices"]
        assert choice["message"]["content"] == direct["text"][i].as_py()
        assert choice["finish_reason"] == direct["finish_reason"][i].as_py()
        usage: dict[str, Any] = body["usage"]
        assert usage["prompt_tokens"] == direct["prompt_tokens"][i]
        assert usage["completion_tokens"] == direct["completion_tokens"][i]
    assert answers["short"]["usage"]["completion_tokens"] <= 2
