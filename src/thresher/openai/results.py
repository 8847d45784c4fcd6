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

How the files survive a crash: `write_answers` writes both under temporary names, from
the job's committed parts and error records alone (never from memory), and renames them
into place only when both are whole. A process that dies before leaves the files as
they were (or none), and the step that writes them (the service's finalize, the sink's
finish, a retry round's end) runs again from the same parts and writes the same lines;
only once they are in place is the batch recorded ended or the sink's publish recorded.

`partial_lines` answers a running batch's requests the same way from its committed
shards.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from thresher.arrays import vector_rows
from thresher.faults import crash_point
from thresher.openai.bodies import bad_line, failed_line, request_answer, unrun_line
from thresher.sinks.parts import move, read_error_records, read_part
from thresher.sources.files import filesystem

__all__ = [
    "Answering",
    "Written",
    "output_rows",
    "partial_lines",
    "request_groups",
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
class Answering:
    """Which file answers each request, and its line there (see the module docstring).
    `names` = (batch id, model: "" for each row's own `model`, endpoint); `lines`, where
    given, each request's 1-based line in the batch file, by custom_id (the job's own
    bad records count the lines of its input, not the batch's)."""

    names: tuple[str, str, str]
    lines: Mapping[str, int] = field(default_factory=dict)
    failed: dict[str, tuple[int, str]] = field(default_factory=dict)  # id: (line, message)
    bad: list[tuple[int, str]] = field(default_factory=list)  # (line, error line)
    answered: set[str] = field(default_factory=set)
    tokens: list[int] = field(default_factory=lambda: [0, 0])  # prompt, completion

    def add_records(self, records: Iterable[dict[str, Any]]) -> None:
        """Bad records: a request failed alone (one per request, however many of its
        inputs failed), or a bad line never run."""
        for record in records:
            custom_id, message = record.get("id"), str(record.get("message", ""))
            line = int(self.lines.get(str(custom_id), record.get("line") or 0))
            if record.get("stage") in FAILED_ALONE and isinstance(custom_id, str):
                self.failed.setdefault(custom_id, (line, message))
            else:
                code = str(record.get("error"))
                self.bad.append((line, bad_line(self.names[0], custom_id, line, code, message)))

    def output(self, rows: Iterator[dict[str, Any]]) -> Iterator[str]:
        """The output lines of the requests `rows` answer, in order; a request that
        cannot be answered (its own problem) joins `failed` instead."""
        batch_id, model, endpoint = self.names
        for custom_id, group in request_groups(rows):
            if custom_id in self.failed:
                continue
            first = group[0]
            names = (batch_id, model or str(first.get("model")), endpoint)
            answer = request_answer(custom_id, group, names)
            if isinstance(answer, str):
                line = self.lines.get(custom_id, int(first.get("line") or 0))
                self.failed[custom_id] = (line, answer)
                continue
            self.answered.add(custom_id)
            self.tokens[0] += answer[1]["prompt_tokens"]
            self.tokens[1] += answer[1].get("completion_tokens", 0)
            yield answer[0]

    def errors(self, unrun: str | None = None) -> list[str]:
        """The error lines, in line order: failed requests, bad lines, and (with an
        `unrun` code) each request in `lines` neither answered nor failed."""
        batch_id = self.names[0]
        found = [(line, failed_line(batch_id, cid, m)) for cid, (line, m) in self.failed.items()]
        found += self.bad
        if unrun is not None:
            done = self.answered | self.failed.keys()
            found += [
                (line, unrun_line(batch_id, cid, unrun))
                for cid, line in self.lines.items()
                if cid not in done
            ]
        return [text for _, text in sorted(found, key=lambda item: item[0])]

    def written(self, errors: int) -> Written:
        return Written(len(self.answered), errors, self.tokens[0], self.tokens[1])


def write_answers(
    paths: tuple[str, str],
    answering: Answering,
    rows: Iterator[dict[str, Any]],
    unrun: str | None = None,
) -> Written:
    """Write the output and error files at `paths` (local paths or URLs), replacing them
    whole once both are written: the output lines of `rows` (the job's output rows in
    input order), then the error lines (see `Answering.errors`)."""
    fs, _ = filesystem(paths[0])
    targets = [filesystem(path)[1] for path in paths]
    with _replacing(fs, targets) as (out, err):
        for line in answering.output(rows):
            out.write(line.encode("utf-8"))
        crash_point("mid_answers")
        errors = answering.errors(unrun)
        for line in errors:
            err.write(line.encode("utf-8"))
    return answering.written(len(errors))


def partial_lines(
    parts: tuple[list[str], list[str]], file_format: str, names: tuple[str, str, str], errors: bool
) -> Iterator[str]:
    """The lines a running batch's output (or error) file has so far: the requests of
    its committed shards, `parts` = (output parts, error parts)."""
    answering = Answering(names)
    for path in parts[1]:
        answering.add_records(read_error_records(path))
    answered = answering.output(output_rows(parts[0], file_format))
    if not errors:
        yield from answered
        return
    for _ in answered:  # its own problems join `failed` as they are found
        pass
    yield from answering.errors()


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


@contextmanager
def _replacing(fs: Any, paths: list[str]) -> Iterator[list[Any]]:
    """Binary files that replace `paths` whole, one after the other, when the block ends
    without error (none is replaced before all are written)."""
    with ExitStack() as stack:
        files = [stack.enter_context(fs.open(f"{path}.tmp", "wb")) for path in paths]
        yield files
    for path in paths:
        move(fs, f"{path}.tmp", path)
