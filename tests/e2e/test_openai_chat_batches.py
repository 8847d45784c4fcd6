"""A chat-completions batch through the official `openai` client against a real
`thresher serve`, on a small causal LM made in the test (random weights, a tokenizer
trained offline): greedy answers equal transformers' own `generate` token for token, a
request with a parameter the model does not support goes to the error file alone; and a
completions batch of plain prompts, equal to `generate` too."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from .servers import Server, ServiceSite
from .test_openai_batches import wait_batch

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.usefixtures("hf_offline")]

CHATS = [
    [{"role": "user", "content": "hello world"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the quick fox"}],
    [{"role": "user", "content": "batch inference runs a model"}],
]
PROMPTS = ["once upon a time", "the model reads"]
MAX_TOKENS = 6


def greedy(folder: Path, messages: list[dict[str, str]] | str) -> tuple[str, int, int]:
    """transformers' own greedy generate on a chat (its template) or a plain prompt:
    (text, prompt tokens, completion tokens)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    if isinstance(messages, str):
        prompt = tokenizer(messages)["input_ids"]
    else:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    inputs = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(
            inputs,
            attention_mask=torch.ones_like(inputs),
            do_sample=False,
            max_new_tokens=MAX_TOKENS,
            pad_token_id=tokenizer.pad_token_id,
        )
    new = out[0, len(prompt) :].tolist()
    if tokenizer.eos_token_id in new:
        new = new[: new.index(tokenizer.eos_token_id) + 1]
    return tokenizer.decode(new, skip_special_tokens=True), len(prompt), len(new)


def test_a_chat_batch_answers_as_transformers_generate_does(
    tmp_path: Path, tiny_causal_lm: Callable[[], Path]
) -> None:
    folder = tiny_causal_lm()
    settings = f"""
[models.tiny]
kind = "llm"
uri = {json.dumps(str(folder))}
options = {{ device = "cpu" }}
"""
    site = ServiceSite(tmp_path, max_upload_bytes=1_000_000, settings=settings)
    server = Server(site, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    try:
        client = OpenAI(base_url=f"{server.url}/v1", api_key=site.token("acme"), max_retries=0)
        lines = [
            json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                        "body": {"model": "tiny", "messages": m, "max_tokens": MAX_TOKENS}})
            for i, m in enumerate(CHATS)
        ] + [
            json.dumps({"custom_id": "odd", "method": "POST", "url": "/v1/chat/completions",
                        "body": {"model": "tiny", "messages": CHATS[0], "logit_bias": {"1": 5}}})
        ]  # fmt: skip
        uploaded = client.files.create(file=("\n".join(lines) + "\n").encode(), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        done = wait_batch(client, batch.id)
        assert done.status == "completed", done
        answers = [
            json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()
        ]
        check_greedy_answers(answers, folder)
        (error,) = [
            json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()
        ]
        assert error["custom_id"] == "odd" and error["response"]["status_code"] == 400
        assert "logit_bias" in error["response"]["body"]["error"]["message"]
        assert done.usage is not None and done.usage.output_tokens > 0
        check_completions(client, folder)
    finally:
        server.stop()


def check_completions(client: OpenAI, folder: Path) -> None:
    """A `/v1/completions` batch: each prompt's `text_completion` equals greedy generate."""
    lines = [
        json.dumps({"custom_id": f"p{i}", "method": "POST", "url": "/v1/completions",
                    "body": {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS}})
        for i, prompt in enumerate(PROMPTS)
    ]  # fmt: skip
    uploaded = client.files.create(file=("\n".join(lines) + "\n").encode(), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h"
    )
    done = wait_batch(client, batch.id)
    assert done.status == "completed" and done.error_file_id is None, done
    answers = _lines(client, done.output_file_id)
    assert [a["custom_id"] for a in answers] == ["p0", "p1"]
    for answer, prompt in zip(answers, PROMPTS, strict=True):
        body = answer["response"]["body"]
        text, prompt_tokens, completion_tokens = greedy(folder, prompt)
        assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
        (choice,) = body["choices"]
        assert (choice["index"], choice["text"]) == (0, text)
        assert choice["finish_reason"] == ("length" if completion_tokens == MAX_TOKENS else "stop")
        assert body["usage"]["completion_tokens"] == completion_tokens
        assert body["usage"]["prompt_tokens"] == prompt_tokens


def check_greedy_answers(answers: list[Any], folder: Path) -> None:
    """Output lines c0, c1, c2 answer CHATS as transformers' greedy `generate` does,
    token for token, with its usage."""
    assert [a["custom_id"] for a in answers] == ["c0", "c1", "c2"]
    for answer, messages in zip(answers, CHATS, strict=True):
        body = answer["response"]["body"]
        text, prompt_tokens, completion_tokens = greedy(folder, messages)
        assert body["object"] == "chat.completion" and body["model"] == "tiny"
        (choice,) = body["choices"]
        assert choice["message"] == {"role": "assistant", "content": text, "refusal": None}
        assert choice["finish_reason"] == ("length" if completion_tokens == MAX_TOKENS else "stop")
        assert body["usage"] == {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }


def _lines(client: OpenAI, file_id: str | None) -> list[Any]:
    assert file_id is not None
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines()]
