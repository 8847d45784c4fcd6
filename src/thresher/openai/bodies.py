"""OpenAI's answer to one request of a batch, as a line of the output or error file.

An output line is `{"id", "custom_id", "response": {"status_code": 200, "request_id",
"body"}, "error": null}`, the body exactly OpenAI's: an `/v1/embeddings` answer (`object:
"list"`, `data[i]` with `index` and `embedding` — floats, or base64 of little-endian
float32 for `encoding_format = "base64"` — `model`, `usage`), or a `chat.completion` /
`text_completion` (`choices` with `message` or `text` and `finish_reason`, `usage`). An
error line is `failed_line` (a request that failed on its own: `response.status_code`
400 and `response.body.error`) or `bad_line` / `unrun_line` (`"response": null` and
OpenAI's `error`). Which line each request gets is `sinks.openai_answers`' to say.
"""

from __future__ import annotations

import base64
import hashlib
import time
from typing import Any

import numpy as np
import orjson

__all__ = [
    "bad_line",
    "embedding_answer",
    "failed_line",
    "generation_body",
    "request_answer",
    "unrun_line",
]


def request_answer(
    custom_id: str, group: list[dict[str, Any]], names: tuple[str, str, str]
) -> tuple[str, dict[str, int]] | str:
    """The output line of one request's rows and its usage, or why the request cannot
    be answered (a `dimensions` the model does not give)."""
    batch_id, model, endpoint = names
    if endpoint == "/v1/embeddings":
        body, problem = _embedding_body(group, model)
    else:
        key = _id("gen", batch_id, custom_id)
        body, problem = generation_body(group[0], model, endpoint, key), None
    if problem is not None:
        return problem
    response = {"status_code": 200, "request_id": _id("req", batch_id, custom_id), "body": body}
    return _line(batch_id, custom_id, response, None), body["usage"]


def _embedding_body(rows: list[dict[str, Any]], model: str) -> tuple[dict[str, Any], str | None]:
    """The `/v1/embeddings` answer for one request's rows, or why it cannot be given."""
    rows = sorted(rows, key=lambda r: int(r["index"]))
    vectors = [np.asarray(row["embedding"], dtype=np.float32) for row in rows]
    tokens = sum(int(row.get("tokens") or 0) for row in rows)
    first = rows[0]
    return embedding_answer(
        vectors, tokens, model, first.get("encoding_format"), first.get("dimensions")
    )


def embedding_answer(
    vectors: list[np.ndarray], tokens: int, model: str, encoding: str | None, dimensions: Any
) -> tuple[dict[str, Any], str | None]:
    """OpenAI's `/v1/embeddings` body for one request's vectors (floats, or base64 of
    little-endian float32), or why it cannot be given (a `dimensions` the model does not
    give)."""
    data = []
    for index, vector in enumerate(vectors):
        if dimensions is not None and dimensions != len(vector):
            size = len(vector)
            return (
                {},
                f"dimensions: this model gives {size}-dimensional embeddings, not {dimensions}",
            )
        embedding: Any = vector.tolist()
        if encoding == "base64":
            embedding = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}, None


def generation_body(row: dict[str, Any], model: str, endpoint: str, key: str) -> dict[str, Any]:
    """OpenAI's `/v1/chat/completions` or `/v1/completions` body for one generated row
    (a `kind = "llm"` model's `text`, `finish_reason` and token counts; lists for n > 1)."""
    texts = row["text"] if isinstance(row["text"], list) else [row["text"]]
    reasons = (
        row["finish_reason"] if isinstance(row["finish_reason"], list) else [row["finish_reason"]]
    )
    chat = endpoint == "/v1/chat/completions"
    choices = [
        {"index": i, "message": {"role": "assistant", "content": text, "refusal": None}}
        if chat
        else {"index": i, "text": text}
        for i, text in enumerate(texts)
    ]
    for choice, reason in zip(choices, reasons, strict=True):
        choice.update({"logprobs": None, "finish_reason": reason})
    usage = {
        name: int(row[name]) for name in ("prompt_tokens", "completion_tokens", "total_tokens")
    }
    digest = key.split("_", 1)[1]
    return {
        "id": f"chatcmpl-{digest}" if chat else f"cmpl-{digest}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def failed_line(batch_id: str, custom_id: str, message: str) -> str:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    request_id = _id("req", batch_id, custom_id)
    response = {"status_code": 400, "request_id": request_id, "body": {"error": error}}
    return _line(batch_id, custom_id, response, None)


def unrun_line(batch_id: str, custom_id: str, code: str) -> str:
    """The error-file line of a request its batch never ran (`code` = `batch_cancelled`,
    `batch_expired` or `batch_failed`)."""
    message = f"this request was not run: {code.removeprefix('batch_')}"
    return _line(batch_id, custom_id, None, {"code": code, "message": message})


def bad_line(batch_id: str, custom_id: str | None, line: int, code: str, message: str) -> str:
    """The error-file line of a request line never run because it is bad (`thresher
    run`'s `openai-batch` sink; the service fails such a batch whole): `"response":
    null`, and `error` with OpenAI's `code` and the 1-based `line`, as in a failed
    batch's `errors.data`. Its id is the line's: a repeated custom_id has its own."""
    error = {"code": code, "message": message, "line": line}
    key = f"{custom_id}\0line {line}"
    answer = {"id": _id("batch_req", batch_id, key), "custom_id": custom_id, "response": None}
    return _json_line({**answer, "error": error})


def _line(batch_id: str, custom_id: str, response: Any, error: Any) -> str:
    line = {
        "id": _id("batch_req", batch_id, custom_id),
        "custom_id": custom_id,
        "response": response,
        "error": error,
    }
    return _json_line(line)


def _json_line(value: Any) -> str:
    """One JSON line, through orjson: an embeddings line is hundreds of floats, and json's
    float formatting was most of writing a batch's results (~0.35 ms a line, 18x orjson's)."""
    return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE).decode()


def _id(prefix: str, batch_id: str, custom_id: str) -> str:
    """A stable id for a request's answer: the same batch and custom_id, the same id."""
    digest = hashlib.sha256(f"{batch_id}\0{custom_id}".encode()).hexdigest()[:24]
    return f"{prefix}_{digest}"
