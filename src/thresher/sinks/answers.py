"""A job's requests answered from its committed parts, one answer per request: the one
mechanism behind every answer thresher gives a request, whether a line of an OpenAI
batch (`sinks.openai_answers`: the service's batches, `thresher run`'s `openai-batch` sink) or
a record of the service's request buffer (`service.background.buffer`).

A request is a `custom_id`: one line of the job's input, whose output rows the job writes
next to each other in input order. One rule says what answers it:

1. **An error record of its own** (the first, if there are several): it failed, even
   when the output part holds rows of it too. The exactly-once contract puts each row
   in one part only (a shard's output and error parts are committed together, and the
   worker sends a row to one of them), so a request found in both is a request of
   several rows (an embeddings line of several inputs) some of which failed: the rows
   that passed cannot answer it whole. A retry round moves fixed rows from a shard's
   error part to a part of its own in two steps (`coordinator/retry.py`); answers are
   made only once the round has ended, after both.
2. **Its output rows**: answered, unless the shape finds they cannot answer it (its own
   problem, say a `dimensions` the model does not give): then it failed.
3. **Neither**: where the caller knows the job has ended (`errors(unrun=...)`), the
   answer for a request the job never answered (cancelled, expired, a failed job).

An error record that fails no request (a bad line never run, a repeated `custom_id`) is
answered on its own. What an answer looks like is the `Shape`'s: OpenAI's output and
error lines (`sinks.openai_answers.OpenAILines`), or a buffered record's output row or error
(`service.background.buffer.RecordAnswers`).

How the answers survive a crash, for every user: they are made from the job's committed
parts and error records alone, never from memory, so making them again gives the same
answers; and they land in one step that puts all of them in place or none: OpenAI's two
files written under temporary names and renamed into place once both are whole
(`sinks.openai_answers.write_answers`), a buffered batch's records settled in one store
transaction that answers only records still `batched` (`store.requests.settle`). A
process that dies before the step leaves the previous answers (or none), and whatever
runs the step runs it again from the same parts: the service's batch finalize, the
sink's finish or `thresher resume`, a retry round run again, the buffer's finished hook
or its reconcile pass. Only once the step is done is it recorded (the batch ended, the
publish recorded, the records no longer `batched`), and it is not run again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Answering", "Shape", "Unanswerable", "request_groups"]

A = TypeVar("A")
A_co = TypeVar("A_co", covariant=True)


@dataclass(frozen=True)
class Unanswerable:
    """Why a request's output rows cannot answer it: it failed (rule 2)."""

    reason: str


class Shape(Protocol[A_co]):
    """What an answer of type `A` looks like, and which error records fail a request."""

    def request_of(self, record: dict[str, Any]) -> str | None:
        """The request an error record fails, or None: a record answered on its own."""
        ...

    def answer(self, custom_id: str, rows: list[dict[str, Any]]) -> A_co | Unanswerable:
        """A request's answer from its output rows, or why they cannot answer it."""
        ...

    def failure(self, custom_id: str | None, line: int, record: dict[str, Any]) -> A_co:
        """The answer of a failed request (`custom_id`), or of an error record that
        fails none (None), from its error record (`stage`, `error`, `message`)."""
        ...


@dataclass
class Answering(Generic[A]):
    """Which answer each request gets (see the module docstring): `add_records` first
    (the job's error records), then `output` (its output rows), then `errors`. `lines`,
    where given, each request's 1-based line by custom_id: the order of `errors`, and the
    requests `errors(unrun=...)` answers when the job left them out."""

    shape: Shape[A]
    lines: Mapping[str, int] = field(default_factory=dict)
    failed: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    alone: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)

    def add_records(self, records: Iterable[dict[str, Any]]) -> None:
        """Error records: each fails its request (the first of a request's counts), or
        is answered on its own."""
        for record in records:
            custom_id = self.shape.request_of(record)
            named = custom_id if custom_id is not None else str(record.get("id"))
            line = int(self.lines.get(named, record.get("line") or 0))
            if custom_id is None:
                self.alone.append((line, record))
            else:
                self.failed.setdefault(custom_id, (line, record))

    def output(self, rows: Iterator[dict[str, Any]]) -> Iterator[A]:
        """The answers of the requests `rows` answer, in order: not a request with an
        error record (rule 1); one its rows cannot answer joins `failed`."""
        for custom_id, group in request_groups(rows):
            if custom_id in self.failed:
                continue
            answer = self.shape.answer(custom_id, group)
            if isinstance(answer, Unanswerable):
                line = self.lines.get(custom_id, int(group[0].get("line") or 0))
                self.failed[custom_id] = (line, {"stage": "predict", "message": answer.reason})
                continue
            self.answered.add(custom_id)
            yield answer

    def errors(self, unrun: Callable[[str, int], A] | None = None) -> list[A]:
        """The answers of failed requests and lone error records, in line order; with
        `unrun` (the job has ended), also `unrun(custom_id, line)` for each request in
        `lines` neither answered nor failed."""
        failure = self.shape.failure
        found = [(line, failure(cid, line, record)) for cid, (line, record) in self.failed.items()]
        found += [(line, failure(None, line, record)) for line, record in self.alone]
        if unrun is not None:
            done = self.answered | self.failed.keys()
            found += [
                (line, unrun(cid, line)) for cid, line in self.lines.items() if cid not in done
            ]
        return [answer for _, answer in sorted(found, key=lambda item: item[0])]


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
