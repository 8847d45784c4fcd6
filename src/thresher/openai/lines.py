"""A batch input file's request lines, checked as OpenAI checks them, and turned into the
input of the job that answers them.

Each line is `{"custom_id", "method": "POST", "url": <the batch's endpoint>, "body"}`.
Problems with the file itself fail the whole batch, each reported with OpenAI's `code`
and the 1-based `line`: a line that is not a JSON object, a missing or repeated
`custom_id`, a `method` other than POST, a `url` that is not the batch's endpoint, a body
without its input, `stream: true`, a model the server does not serve or two models in one
file, an empty file, more lines than the server takes. A file with any of them makes no
job (OpenAI's behaviour: nothing is half run).

A good file becomes a JSONL of one row per input: for `/v1/embeddings`, `custom_id`,
`line`, `index` within the request, `input`, and the line's own `encoding_format` and
`dimensions` (a request with a list of inputs is several rows, answered together); for
`/v1/chat/completions` and `/v1/completions`, one row with `messages` (as JSON text) or
`prompt`, and `params`, the body's sampling parameters as JSON (a `kind = "llm"` model
reads them row by row; one it does not support fails that request alone). Python's `json` parses
the lines (no native code: a hostile line raises, it cannot crash the server).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ENDPOINTS", "LineProblem", "Prepared", "prepare_lines"]

ENDPOINTS = ("/v1/embeddings", "/v1/chat/completions", "/v1/completions")
# The body's members that are the request itself, not its sampling parameters.
NOT_PARAMS = ("model", "messages", "prompt", "stream", "user")
MAX_PROBLEMS = 100  # reported per batch; the count says how many more there were


@dataclass(frozen=True)
class LineProblem:
    code: str
    message: str
    line: int | None = None
    param: str | None = None

    def public(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


@dataclass
class Prepared:
    """What came of checking a batch file: its model and request count, or problems."""

    model: str | None = None
    requests: int = 0
    problems: list[LineProblem] = field(default_factory=list)
    more_problems: int = 0

    def add(self, problem: LineProblem) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)
        else:
            self.more_problems += 1


def prepare_lines(
    source: Path, dest: Path, endpoint: str, models: set[str], max_requests: int
) -> Prepared:
    """Check every line of `source`; write the job's input rows to `dest` if all pass
    (`dest` is removed otherwise)."""
    seen: set[str] = set()
    found = Prepared()
    with source.open("rb") as lines, dest.open("w", encoding="utf-8") as out:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            found.requests += 1
            if found.requests > max_requests:
                found.add(
                    LineProblem(
                        "too_many_requests",
                        f"more than {max_requests:,} requests in the file; split it",
                        number,
                    )
                )
                break
            rows = _rows(raw, number, endpoint, seen, found)
            if not found.problems:
                out.writelines(json.dumps(row) + "\n" for row in rows)
    if found.requests == 0:
        found.add(LineProblem("empty_file", "the file has no request lines"))
    if found.model is not None and found.model not in models:
        served = ", ".join(sorted(models)) or "none"
        found.add(
            LineProblem(
                "model_not_found",
                f"the server serves no model {found.model!r} (it serves: {served})",
                param="body.model",
            )
        )
    if found.problems:
        dest.unlink(missing_ok=True)
    return found


def _rows(
    raw: bytes, number: int, endpoint: str, seen: set[str], found: Prepared
) -> Iterator[dict[str, Any]]:
    """The job rows of one line, or nothing (its problems added to `found`)."""
    line = _parse(raw)
    if line is None:
        found.add(LineProblem("invalid_json_line", "this line is not a JSON object", number))
        return iter(())
    problems = list(_line_problems(line, number, endpoint, seen))
    given = line.get("body")
    body: dict[str, Any] = given if isinstance(given, dict) else {}
    model = body.get("model")
    if isinstance(model, str) and found.model is None:
        found.model = model
    elif isinstance(model, str) and model != found.model:
        problems.append(
            LineProblem(
                "mismatched_model",
                f"model {model!r}: every line of a batch uses one model ({found.model!r} before)",
                number,
                "body.model",
            )
        )
    rows, problem = _inputs(endpoint, body, number)
    if problem is not None:
        problems.append(problem)
    for found_problem in problems:
        found.add(found_problem)
    if problems:
        return iter(())
    custom_id = str(line["custom_id"])
    return ({"custom_id": custom_id, "line": number, **row} for row in rows)


def _inputs(
    endpoint: str, body: dict[str, Any], number: int
) -> tuple[list[dict[str, Any]], LineProblem | None]:
    """The job rows of one request's body (without its custom_id and line)."""
    params = json.dumps({k: v for k, v in body.items() if k not in NOT_PARAMS})
    if endpoint == "/v1/chat/completions":
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
        ):
            return [], LineProblem(
                "invalid_input",
                "body.messages must be a non-empty list of {role, content}",
                number,
                "body.messages",
            )
        return [{"index": 0, "messages": json.dumps(messages), "params": params}], None
    if endpoint == "/v1/completions":
        if not isinstance(body.get("prompt"), str):
            return [], LineProblem(
                "invalid_input", "body.prompt must be a string", number, "body.prompt"
            )
        return [{"index": 0, "prompt": body["prompt"], "params": params}], None
    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return [], LineProblem(
            "invalid_input",
            "body.input must be a string or a non-empty list of strings",
            number,
            "body.input",
        )
    extra = {"encoding_format": body.get("encoding_format"), "dimensions": body.get("dimensions")}
    return [{"index": i, "input": text, **extra} for i, text in enumerate(texts)], None


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        line = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return line if isinstance(line, dict) else None


def _line_problems(
    line: dict[str, Any], number: int, endpoint: str, seen: set[str]
) -> Iterator[LineProblem]:
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        yield LineProblem(
            "missing_custom_id", "custom_id must be a non-empty string", number, "custom_id"
        )
    elif custom_id in seen:
        yield LineProblem(
            "duplicate_custom_id",
            f"custom_id {custom_id!r} is on an earlier line too",
            number,
            "custom_id",
        )
    else:
        seen.add(custom_id)
    if line.get("method") != "POST":
        yield LineProblem("invalid_method", "method must be POST", number, "method")
    if line.get("url") != endpoint:
        yield LineProblem(
            "mismatched_endpoint",
            f"url {line.get('url')!r} is not the batch's endpoint {endpoint!r}",
            number,
            "url",
        )
    body: dict[str, Any] | None = line.get("body")
    if not isinstance(body, dict):
        yield LineProblem("invalid_body", "body must be a JSON object", number, "body")
        return
    if not isinstance(body.get("model"), str):
        yield LineProblem("missing_model", "body.model must name a model", number, "body.model")
    if body.get("stream"):
        yield LineProblem(
            "stream_unsupported", "a batch cannot stream; remove stream", number, "body.stream"
        )
