"""A batch input file's request lines, checked as OpenAI checks them, and turned into the
input of the job that answers them.

Each line is `{"custom_id", "method": "POST", "url": <the batch's endpoint>, "body"}`.
Problems with the file itself fail the whole batch, each reported with OpenAI's `code`
and the 1-based `line`: a line that is not a JSON object, a missing or repeated
`custom_id`, a `method` other than POST, a `url` that is not the batch's endpoint, a body
that is not an object or names no model, `stream: true`, a string that cannot be
written as UTF-8 (a lone surrogate: valid JSON, but its answer could never be written),
a model the server does not serve (or not for this endpoint) or two models in one file,
an empty file, more lines or bytes than the server takes. A file with any of them makes
no job (OpenAI's behaviour: nothing is half run). A request whose body alone is wrong
(its input not text or missing, a bad `encoding_format` or `dimensions`, more inputs
than allowed) fails on its own, as at OpenAI: the service answers it in the error file
with `response.status_code` 400 and runs the other lines (`Prepared.rejected`).

The check of one line is `LineCheck.check`, the same for the service and for `thresher
run`'s `openai-batch` source (which makes each bad line a bad record and answers the
rest): only how a repeated `custom_id` is known differs, a set of those seen so far
(`SeenIds`) or the lines a first pass found (`KnownRepeats`).

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
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from thresher.texts import first_unencodable

__all__ = [
    "ENDPOINTS",
    "MAX_INPUTS",
    "CustomIds",
    "KnownRepeats",
    "LineCheck",
    "LineProblem",
    "Prepared",
    "SeenIds",
    "answers",
    "prepare_lines",
    "request_lines",
]

ENDPOINTS = ("/v1/embeddings", "/v1/chat/completions", "/v1/completions")
EMBEDDINGS = ENDPOINTS[0]
TABULAR_KINDS = ("sklearn", "xgboost", "lightgbm")  # predictions and probabilities only
MAX_INPUTS = 2048  # inputs in one embeddings request, as OpenAI allows
# The body's members that are the request itself, not its sampling parameters.
NOT_PARAMS = ("model", "messages", "prompt", "stream", "user")
MAX_PROBLEMS = 100  # reported per batch; the count says how many more there were


@dataclass(frozen=True)
class LineProblem:
    code: str
    message: str
    line: int | None = None
    param: str | None = None
    # The custom_id of a request that fails on its own (a wrong parameter in its body:
    # an input that is not text, a bad encoding_format, too many inputs): the service
    # answers it 400 in the error file and runs the other lines; None for a problem
    # with the file itself.
    request: str | None = None

    def public(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}

    def record(self) -> dict[str, Any]:
        """A request that fails on its own as a bad record of its batch (stage
        `request`), answered like one the model failed (see `sinks.openai_answers`)."""
        return {"id": self.request, "line": self.line, "stage": "request",
                "error": self.code, "message": self.message}  # fmt: skip


@dataclass
class Prepared:
    """What came of checking a batch file: its model and request count, or problems."""

    model: str | None = None
    requests: int = 0
    problems: list[LineProblem] = field(default_factory=list)
    more_problems: int = 0
    rejected: list[LineProblem] = field(default_factory=list)  # requests failing alone

    def add(self, problem: LineProblem) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)
        else:
            self.more_problems += 1


class CustomIds(Protocol):
    """How a check knows that a line's custom_id is on an earlier line too."""

    def repeated(self, custom_id: str, line: int) -> bool:
        """Whether `custom_id`, on line `line`, was on an earlier line; called once per
        line whose custom_id is a non-empty string, in line order."""
        ...


@dataclass
class SeenIds:
    """The custom_ids seen so far, for a check of every line in order; `repeats` are the
    lines whose custom_id was seen before."""

    seen: set[str] = field(default_factory=set)
    repeats: list[int] = field(default_factory=list)

    def repeated(self, custom_id: str, line: int) -> bool:
        if custom_id in self.seen:
            self.repeats.append(line)
            return True
        self.seen.add(custom_id)
        return False


@dataclass(frozen=True)
class KnownRepeats:
    """The lines a first pass over the file (with SeenIds) found repeating a custom_id:
    for a check of any stretch of the file, in any order."""

    lines: frozenset[int]

    def repeated(self, custom_id: str, line: int) -> bool:
        return line in self.lines


@dataclass
class LineCheck:
    """Checks a batch file's lines against its endpoint. `model` is the file's model:
    the first line's that names one (set by the check, or given up front)."""

    endpoint: str
    ids: CustomIds
    model: str | None = None
    model_line: int | None = None  # the first line that named `model`

    def check(self, raw: bytes, number: int) -> tuple[list[dict[str, Any]], list[LineProblem]]:
        """The job rows of line `number` (1-based), or its problems (and no rows)."""
        line = _parse(raw)
        if line is None:
            return [], [LineProblem("invalid_json_line", "this line is not a JSON object", number)]
        unwritable = first_unencodable(line)
        if unwritable is not None:  # its answer could never be written: refused now
            message = f"{unwritable or 'a key'} holds a lone surrogate (\\ud800-\\udfff), not text"
            return [], [LineProblem("invalid_input", message, number, unwritable or None)]
        problems = list(_line_problems(line, number, self.endpoint, self.ids))
        given = line.get("body")
        body: dict[str, Any] = given if isinstance(given, dict) else {}
        model = body.get("model")
        if isinstance(model, str) and self.model is None:
            self.model, self.model_line = model, number
        elif isinstance(model, str) and model != self.model:
            message = (
                f"model {model!r}: every line of a batch uses one model ({self.model!r} before)"
            )
            problems.append(LineProblem("mismatched_model", message, number, "body.model"))
        rows, problem = _inputs(self.endpoint, body, number)
        if problem is not None:
            own = not problems and isinstance(line.get("custom_id"), str)
            problems.append(replace(problem, request=line["custom_id"]) if own else problem)
        if problems:
            return [], problems
        custom_id = str(line["custom_id"])
        return [{"custom_id": custom_id, "line": number, **row} for row in rows], []


def answers(kind: str, endpoint: str) -> bool:
    """Whether a model of `kind` can answer `endpoint`'s requests: the generation
    endpoints take an `llm`; embeddings any kind that may give an `embedding` column
    (an encoder, or a model of the user's own), not an `llm` nor a tabular model."""
    if endpoint == EMBEDDINGS:
        return kind not in ("llm", *TABULAR_KINDS)
    return kind == "llm"


def prepare_lines(
    source: Path,
    dest: Path,
    endpoint: str,
    models: Mapping[str, str],
    limits: tuple[int, int],
) -> Prepared:
    """Check every line of `source`, a file of at most `limits` = (requests, bytes),
    against the server's `models` (name: kind); write the job's input rows to `dest` if
    the file passes (`dest` is removed otherwise). A request that fails on its own is
    not a problem of the file: it is in `rejected`, and has no rows."""
    max_requests, max_bytes = limits
    found = Prepared()
    size = source.stat().st_size
    if size > max_bytes:
        message = f"the file has {size:,} bytes, more than this server's {max_bytes:,}; split it"
        found.add(LineProblem("file_too_large", message))
        return found
    check = LineCheck(endpoint, SeenIds())
    # Written aside and renamed into place: another server sharing the data folder may
    # check the same batch at once, and its job may already be reading `dest`.
    written = dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp")
    try:
        with source.open("rb") as lines, written.open("w", encoding="utf-8") as out:
            _check_lines(lines, check, found, max_requests, out)
    except BaseException:
        written.unlink(missing_ok=True)
        raise
    found.model = check.model
    if found.requests == 0:
        found.add(LineProblem("empty_file", "the file has no request lines"))
    if check.model is not None:
        for problem in _model_problems(check.model, check.model_line, endpoint, models):
            found.add(problem)
    if found.problems:
        written.unlink()
        dest.unlink(missing_ok=True)
    else:
        os.replace(written, dest)
    return found


def request_lines(prepared: Path) -> dict[str, int]:
    """Each request of a good file's job input rows (`prepare_lines`' `dest`): its
    custom_id and 1-based line in the batch file, in line order."""
    found: dict[str, int] = {}
    with prepared.open(encoding="utf-8") as rows:
        for text in rows:
            row = json.loads(text)
            found.setdefault(str(row["custom_id"]), int(row["line"]))
    return found


def _check_lines(
    lines: Iterable[bytes], check: LineCheck, found: Prepared, max_requests: int, out: TextIO
) -> None:
    """Check each line into `found`, writing the rows to `out` while none has a problem."""
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        found.requests += 1
        if found.requests > max_requests:
            message = f"more than {max_requests:,} requests in the file; split it"
            found.add(LineProblem("too_many_requests", message, number))
            return
        rows, problems = check.check(raw, number)
        if len(problems) == 1 and problems[0].request is not None:
            found.rejected.append(problems[0])
            continue
        for problem in problems:
            found.add(problem)
        if not found.problems:
            out.writelines(json.dumps(row) + "\n" for row in rows)


def _model_problems(
    model: str, line: int | None, endpoint: str, models: Mapping[str, str]
) -> Iterator[LineProblem]:
    """Why the server cannot run the file's `model` (named first on `line`), if it cannot."""
    if model not in models:
        served = ", ".join(sorted(models)) or "none"
        message = f"the server serves no model {model!r} (it serves: {served})"
        yield LineProblem("model_not_found", message, line, "body.model")
    elif not answers(models[model], endpoint):
        message = f"model {model!r} ({models[model]}) does not answer {endpoint} requests"
        yield LineProblem("model_not_supported", message, line, "body.model")


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
    return _embedding_inputs(body, number)


def _embedding_inputs(
    body: dict[str, Any], number: int
) -> tuple[list[dict[str, Any]], LineProblem | None]:
    """The rows of an `/v1/embeddings` body: one per input, with the request's own
    `encoding_format` and `dimensions` (each checked: the rows are typed columns)."""
    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return [], LineProblem(
            "invalid_input",
            "body.input must be a string or a non-empty list of strings",
            number,
            "body.input",
        )
    if len(texts) > MAX_INPUTS:
        message = f"body.input holds {len(texts):,} inputs, more than the {MAX_INPUTS:,} allowed"
        return [], LineProblem("invalid_input", message, number, "body.input")
    encoding, dimensions = body.get("encoding_format"), body.get("dimensions")
    if encoding not in (None, "float", "base64"):
        message = 'body.encoding_format must be "float" or "base64"'
        return [], LineProblem("invalid_input", message, number, "body.encoding_format")
    if dimensions is not None and (
        not isinstance(dimensions, int)
        or isinstance(dimensions, bool)
        or not 0 < dimensions < 2**31
    ):
        message = "body.dimensions must be a positive integer"
        return [], LineProblem("invalid_input", message, number, "body.dimensions")
    extra = {"encoding_format": encoding, "dimensions": dimensions}
    return [{"index": i, "input": text, **extra} for i, text in enumerate(texts)], None


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        line = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return line if isinstance(line, dict) else None


def _line_problems(
    line: dict[str, Any], number: int, endpoint: str, ids: CustomIds
) -> Iterator[LineProblem]:
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        yield LineProblem(
            "missing_custom_id", "custom_id must be a non-empty string", number, "custom_id"
        )
    elif ids.repeated(custom_id, number):
        yield LineProblem(
            "duplicate_custom_id",
            f"custom_id {custom_id!r} is on an earlier line too",
            number,
            "custom_id",
        )
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
