"""A batch's request lines answered from its job's parts: one writer of OpenAI's output
and error files, for the service's batches and `thresher run`'s `openai-batch` sink.

Every request line is answered exactly once, in one of the two files:

- in the output file, in input order, a request whose rows the job wrote
  (`bodies.request_answer`), unless one of them failed;
- in the error file, in line order: a request that failed on its own (a bad record of
  stage `predict`, one the model rejected, or `request`, a wrong parameter its line
  was refused for; or a `dimensions` the model does not give) with `response.status_code`
  400; a bad line never run (any other stage: `thresher run`'s `openai-batch` source
  makes one of each line that fails OpenAI's checks) with `"response": null` and its
  code and line; a request of the batch's that the job neither answered nor failed
  (cancelled, expired, a failed job) with `"response": null` and the batch's `unrun`
  code.

Which file answers a request, and how the files survive a crash, is `sinks.answers`'s
(the one mechanism, and crash story, of every request's answer): `write_answers` writes
both files under temporary names from the job's committed parts and error records alone,
and renames them into place once both are whole.

`partial_lines` answers a running batch's requests the same way from its committed
shards.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from thresher.arrays import vector_rows
from thresher.faults import crash_point
from thresher.openai.bodies import bad_line, failed_line, request_answer, unrun_line
from thresher.sinks.answers import Answering, Unanswerable
from thresher.sinks.parts import move, read_error_records, read_part
from thresher.sources.files import filesystem

__all__ = [
    "OpenAILines",
    "Written",
    "answer_lines",
    "output_rows",
    "partial_lines",
    "write_answers",
]

FAILED_ALONE = ("predict", "request")  # bad records' stages answered 400


@dataclass(frozen=True)
class Written:
    """What the files hold: requests answered and failed, and the tokens used."""

    completed: int
    failed: int
    prompt_tokens: int
    completion_tokens: int = 0

    def manifest(self) -> dict[str, Any]:
        """The counts as OpenAI's batch object (and the sink's manifest) gives them."""
        made = self.completion_tokens
        usage = {
            "input_tokens": self.prompt_tokens,
            "output_tokens": made,
            "total_tokens": self.prompt_tokens + made,
        }
        total = self.completed + self.failed
        requests = {"total": total, "completed": self.completed, "failed": self.failed}
        return {"requests": requests, "usage": usage}


@dataclass
class OpenAILines:
    """Requests answered as OpenAI's lines (`Answering`'s shape): `names` = (batch id,
    model: "" for each row's own `model`, endpoint); `tokens` counts the usage of the
    requests answered (prompt, completion)."""

    names: tuple[str, str, str]
    tokens: list[int] = field(default_factory=lambda: [0, 0])

    def request_of(self, record: dict[str, Any]) -> str | None:
        """A request failed alone (a bad record of stage `predict` or `request`, one
        per request however many of its inputs failed); any other is a bad line."""
        custom_id = record.get("id")
        if record.get("stage") in FAILED_ALONE and isinstance(custom_id, str):
            return custom_id
        return None

    def answer(self, custom_id: str, rows: list[dict[str, Any]]) -> str | Unanswerable:
        batch_id, model, endpoint = self.names
        names = (batch_id, model or str(rows[0].get("model")), endpoint)
        answer = request_answer(custom_id, rows, names)
        if isinstance(answer, str):
            return Unanswerable(answer)
        self.tokens[0] += answer[1]["prompt_tokens"]
        self.tokens[1] += answer[1].get("completion_tokens", 0)
        return answer[0]

    def failure(self, custom_id: str | None, line: int, record: dict[str, Any]) -> str:
        message = str(record.get("message", ""))
        if custom_id is not None:
            return failed_line(self.names[0], custom_id, message)
        code = str(record.get("error"))
        return bad_line(self.names[0], record.get("id"), line, code, message)


def answer_lines(
    names: tuple[str, str, str], lines: Mapping[str, int] | None = None
) -> Answering[str]:
    """A batch's requests answered as OpenAI's lines; `lines`, where given, each
    request's 1-based line in the batch file, by custom_id (the job's own bad records
    count the lines of its input, not the batch's)."""
    return Answering(OpenAILines(names), lines or {})


def write_answers(
    paths: tuple[str, str],
    answering: Answering[str],
    rows: Iterator[dict[str, Any]],
    unrun: str | None = None,
) -> Written:
    """Write the output and error files at `paths` (local paths or URLs), replacing them
    whole once both are written: the output lines of `rows` (the job's output rows in
    input order), then the error lines (`Answering.errors`; with an `unrun` code, the
    job has ended: a request it left out is answered with that code)."""
    shape = answering.shape
    assert isinstance(shape, OpenAILines)  # made by `answer_lines`
    ended = None if unrun is None else partial(_unrun_line, shape.names[0], unrun)
    fs, _ = filesystem(paths[0])
    targets = [filesystem(path)[1] for path in paths]
    with _replacing(fs, targets) as (out, err):
        for line in answering.output(rows):
            out.write(line.encode("utf-8"))
        crash_point("mid_answers")
        errors = answering.errors(ended)
        for line in errors:
            err.write(line.encode("utf-8"))
    return Written(len(answering.answered), len(errors), *shape.tokens)


def _unrun_line(batch_id: str, code: str, custom_id: str, line: int) -> str:
    return unrun_line(batch_id, custom_id, code)


def partial_lines(
    parts: tuple[list[str], list[str]], file_format: str, names: tuple[str, str, str], errors: bool
) -> Iterator[str]:
    """The lines a running batch's output (or error) file has so far: the requests of
    its committed shards, `parts` = (output parts, error parts)."""
    requests = answer_lines(names)
    for path in parts[1]:
        requests.add_records(read_error_records(path))
    answered = requests.output(output_rows(parts[0], file_format))
    if not errors:
        yield from answered
        return
    for _ in answered:  # its own problems join `failed` as they are found
        pass
    yield from requests.errors()


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


@contextmanager
def _replacing(fs: Any, paths: list[str]) -> Iterator[list[Any]]:
    """Binary files that replace `paths` whole, one after the other, when the block ends
    without error (none is replaced before all are written)."""
    with ExitStack() as stack:
        files = [stack.enter_context(fs.open(f"{path}.tmp", "wb")) for path in paths]
        yield files
    for path in paths:
        move(fs, f"{path}.tmp", path)
