"""A batch's job results, written as OpenAI's output and error files.

The output file has one line per request answered, in input order:
`{"id", "custom_id", "response": {"status_code": 200, "request_id", "body"}, "error":
null}`, the body exactly OpenAI's: an `/v1/embeddings` answer (`object: "list"`,
`data[i]` with `index` and `embedding` — floats, or base64 of little-endian float32 for
`encoding_format = "base64"` — `model`, `usage`), or a `chat.completion` /
`text_completion` (`choices` with `message` or `text` and `finish_reason`, `usage`). A
request that failed on its own (the model rejected an input or a sampling parameter, a
`dimensions` the model does not have) is a line of the error
file with `response.status_code` 400 and `response.body.error`; a request the batch
never ran (cancelled, expired) is one with `"response": null` and `error.code`
`batch_cancelled` / `batch_expired`; offline, a bad line (`thresher run`'s
`openai-batch` sink, which answers the others) is one with `"response": null` and
`error` = `{code, message, line}`. Every request line is in exactly one of the files.

The service writes its files with `write_results` (and `partial_lines` while a batch
runs); the `openai-batch` sink with the pieces: `request_groups` of `output_rows`,
`request_answer`, `failed_line`, `bad_line`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import orjson

from thresher.arrays import vector_rows
from thresher.sinks.files import FileSink
from thresher.sinks.parts import read_error_records, read_part

__all__ = [
    "Written",
    "answers",
    "bad_line",
    "embedding_answer",
    "failed_line",
    "generation_body",
    "output_rows",
    "partial_lines",
    "request_answer",
    "request_groups",
    "write_results",
]


@dataclass(frozen=True)
class Written:
    completed: int
    failed: int
    prompt_tokens: int
    completion_tokens: int = 0


def write_results(
    sink: FileSink,
    prepared: Path,
    names: tuple[str, str, str],
    files: tuple[Path, Path],
    unrun: str,
) -> Written:
    """From the job's published output (`sink`) and its input rows (`prepared`), write
    the output and error files `files`; `names` = (batch id, model name, endpoint);
    `unrun` is the code of requests that were never run (`batch_cancelled`,
    `batch_expired`, `batch_failed`)."""
    failed = {str(r.get("id")): str(r.get("message", "")) for r in sink.read_errors()}
    rows = output_rows(sink.published_parts(), sink.file_format)
    answered: set[str] = set()
    prompt_tokens = completion_tokens = 0
    with files[0].open("w", encoding="utf-8") as out:
        for custom_id, line, usage in answers(rows, failed, names):
            answered.add(custom_id)
            prompt_tokens += usage["prompt_tokens"]
            completion_tokens += usage.get("completion_tokens", 0)
            out.write(line)
    with files[1].open("w", encoding="utf-8") as err:
        ids = _custom_ids(prepared)
        errors = _error_lines(err, names[0], ids, (answered, failed), unrun)
    return Written(len(answered), errors, prompt_tokens, completion_tokens)


def answers(
    rows: Iterator[dict[str, Any]], failed: dict[str, str], names: tuple[str, str, str]
) -> Iterator[tuple[str, str, dict[str, int]]]:
    """(custom_id, output line, usage) of each request its rows answer, in order; a
    request that cannot be answered (its own problem) is added to `failed` instead."""
    for custom_id, group in request_groups(rows):
        if custom_id in failed:
            continue
        answer = request_answer(custom_id, group, names)
        if isinstance(answer, str):
            failed[custom_id] = answer
            continue
        yield custom_id, *answer


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


def partial_lines(
    parts: tuple[list[str], list[str]], file_format: str, names: tuple[str, str, str], errors: bool
) -> Iterator[str]:
    """The lines a running batch's output (or error) file has so far: the requests of
    its committed shards, `parts` = (output parts, error parts)."""
    failed: dict[str, str] = {}
    for path in parts[1]:
        failed.update(
            {str(r.get("id")): str(r.get("message", "")) for r in read_error_records(path)}
        )
    answered = answers(output_rows(parts[0], file_format), failed, names)
    if not errors:
        yield from (line for _, line, _ in answered)
        return
    for _ in answered:  # its own problems join `failed` as they are found
        pass
    for custom_id, message in failed.items():
        yield failed_line(names[0], custom_id, message)


def _error_lines(
    err: TextIO,
    batch_id: str,
    ids: Iterable[str],
    outcome: tuple[set[str], dict[str, str]],
    unrun: str,
) -> int:
    answered, failed = outcome
    count = 0
    for custom_id in ids:
        if custom_id in answered:
            continue
        count += 1
        if custom_id in failed:
            err.write(failed_line(batch_id, custom_id, failed[custom_id]))
        else:
            message = f"this request was not run: {unrun.removeprefix('batch_')}"
            err.write(_line(batch_id, custom_id, None, {"code": unrun, "message": message}))
    return count


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


def bad_line(batch_id: str, custom_id: str | None, line: int, code: str, message: str) -> str:
    """The error-file line of a request line never run because it is bad (`thresher
    run`'s `openai-batch` sink; the service fails such a batch whole): `"response":
    null`, and `error` with OpenAI's `code` and the 1-based `line`, as in a failed
    batch's `errors.data`. Its id is the line's: a repeated custom_id has its own."""
    error = {"code": code, "message": message, "line": line}
    key = f"{custom_id}\0line {line}"
    answer = {"id": _id("batch_req", batch_id, key), "custom_id": custom_id, "response": None}
    return _json_line({**answer, "error": error})


def output_rows(parts: list[str], file_format: str) -> Iterator[dict[str, Any]]:
    """The job's output rows, part by part in input order (a batch job writes Parquet:
    its vectors stay binary until they are written once, as OpenAI's JSON)."""
    for url in parts:
        table = read_part(url, file_format)
        for batch in table.to_batches(max_chunksize=1024):
            columns = {name: _values(batch.column(name)) for name in batch.schema.names}
            for i in range(batch.num_rows):
                yield {name: values[i] for name, values in columns.items()}


def _values(column: Any) -> Any:
    """A column's values: an embedding column as rows of a float32 matrix."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(column.type) and pa.types.is_floating(column.type.value_type):
        return vector_rows(column)
    return column.to_pylist()


def request_groups(rows: Iterator[dict[str, Any]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Rows grouped by request: a request's rows are next to each other, in input order."""
    current: str | None = None
    group: list[dict[str, Any]] = []
    for row in rows:
        custom_id = str(row["custom_id"])
        if custom_id != current and group:
            yield str(current), group
            group = []
        current = custom_id
        group.append(row)
    if group:
        yield str(current), group


def _custom_ids(prepared: Path) -> Iterator[str]:
    """Each request's custom_id, once, in input order."""
    last = None
    with prepared.open(encoding="utf-8") as rows:
        for line in rows:
            custom_id = json.loads(line)["custom_id"]
            if custom_id != last:
                yield custom_id
            last = custom_id


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
