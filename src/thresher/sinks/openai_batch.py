"""OpenAI's output and error files for an `openai-batch` source's job:
`sink.format = "openai-batch"` (the default for such a source), `sink.uri` a folder.

    answers/output.jsonl     one line per request answered, in input order
    answers/errors.jsonl     one line per request not answered, in line order
    answers/part-*.parquet   the job's own rows (custom_id, line, index, the embedding
                             or generated text and token counts), as a parquet sink's
    answers/_errors/, _SUCCESS, _thresher.json   as a parquet sink's

The output lines are the service's (`openai.results`); an error line is the service's
for a request the model could not answer (`response.status_code` 400, its
`body.error`), and for a bad line (not JSON, a repeated custom_id, …), `"response":
null` with `error` = `{code, message, line}`, OpenAI's code and the 1-based line. Every
request line is in exactly one of the two files, once.

The parts are a parquet sink's (`files.FileSink`), committed exactly once and
published at finish. At finish, before the publish is recorded, both files are written
from the committed parts into the job's pending folder, so they are published with the
parts in the same step: a job that fails, is killed or is cancelled leaves the previous
answers as they were, and a finish cut short by a crash is finished by `thresher
resume` (the files are written again from the same parts, until the publish is
recorded; from then on they are moved, never written again). `finish` adds the request
counts and token usage to the manifest (`requests`, `usage`).

`thresher retry-errors` runs the requests the model failed on again (the error lines
with a 400 `response`; a bad line cannot pass a second time and stays), as for a
parquet sink: a shard's rows that now pass are a part of the round's own
(`part-00003.r1.parquet`), its error part is replaced. The round's finish writes both
files again from all the parts, a shard's rows merged back into input order, and
replaces them (`_SUCCESS` is away meanwhile: a crash then is finished by running
`retry-errors` again).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import pyarrow as pa

from thresher.errors import SinkError
from thresher.faults import crash_point
from thresher.openai.results import (
    bad_line,
    failed_line,
    output_rows,
    request_answer,
    request_groups,
)
from thresher.openai.settings import ERRORS_FILE, OUTPUT_FILE
from thresher.sinks.files import FilePartTarget, FileSink
from thresher.sinks.parts import StagedPart, move, read_error_records
from thresher.sinks.publish import PUBLISH, SUCCESS, PendingOutput
from thresher.sources.files import filesystem
from thresher.spec import SinkSection

__all__ = ["BatchAnswersSink", "openai_batch_sink", "write_answers"]

COUNTS = ("requests", "usage")  # what finish adds to the manifest


def openai_batch_sink(section: SinkSection) -> BatchAnswersSink:
    """The `openai-batch` sink plug-in (its endpoint filled in by the spec)."""
    files = FileSink(section.uri, "parquet", "overwrite", section.force)
    return BatchAnswersSink(files, str(section.options.get("endpoint", "/v1/embeddings")))


@dataclass
class BatchAnswersSink:
    files: FileSink  # the parts, and the publish that makes them and the files visible
    endpoint: str
    job_id: str | None = field(default=None, init=False)

    def start(
        self, job_id: str, shard_count: int, resume: bool, retry_round: int | None = None
    ) -> str:
        self.job_id = job_id
        self.files.start(job_id, shard_count, resume, retry_round)
        return f"{self.files.root}/{ERRORS_FILE}"

    def written_paths(self) -> list[str]:
        return self.files.written_paths()

    def part_target(self) -> FilePartTarget:
        return self.files.part_target()

    def commit(self, output: StagedPart | None, errors: StagedPart | None) -> None:
        self.files.commit(output, errors)

    def finish(self, manifest: dict[str, Any]) -> None:
        """Write the output and error files among the job's pending parts (unless its
        publish is recorded already: then they are there), then publish them all; after
        a retry round, write them again from the published parts."""
        job_id = self._job()
        if self.files.retry_round is not None:
            self._rewrite(manifest)
            return
        pending = PendingOutput(self.files.root, job_id)
        fs, folder = filesystem(pending.folder)
        if fs.exists(f"{folder}/{PUBLISH}"):  # a publish cut short: its counts are recorded
            with fs.open(f"{folder}/{PUBLISH}", "r") as f:
                recorded = json.load(f)["manifest"]
            manifest.update({key: recorded[key] for key in COUNTS if key in recorded})
        elif fs.exists(folder):
            parts = self.files.committed_parts(job_id)
            manifest.update(write_answers(pending.folder, parts, (job_id, self.endpoint)))
        self.files.finish(manifest)

    def _rewrite(self, manifest: dict[str, Any]) -> None:
        """A retry round's end: both files from every published part, then `_SUCCESS`."""
        fs, root = filesystem(self.files.root)
        if fs.exists(f"{root}/{SUCCESS}"):
            fs.rm(f"{root}/{SUCCESS}")
        parts = (self.files.published_parts(), self.files.published_error_parts())
        manifest.update(write_answers(self.files.root, parts, (self._job(), self.endpoint)))
        self.files.finish(manifest)

    def abort(self) -> None:
        self.files.abort()

    def read_output(self) -> Iterator[pa.Table]:
        return self.files.read_output()

    def read_errors(self, shard: int | None = None) -> Iterator[dict[str, Any]]:
        return self.files.read_errors(shard)

    def _job(self) -> str:
        if self.job_id is None:
            raise SinkError("the sink was not started")
        return self.job_id


def write_answers(
    folder: str, parts: tuple[list[str], list[str]], names: tuple[str, str]
) -> dict[str, Any]:
    """Write OUTPUT_FILE and ERRORS_FILE into `folder` (a job's pending folder) from its
    output parts `parts[0]` (Parquet) and error parts `parts[1]`; `names` = (batch id:
    the job's, endpoint). Returns the counts for the manifest."""
    batch_id, endpoint = names
    failures, failed = _bad_records(parts[1], batch_id)
    fs, root = filesystem(folder)
    usage = {"input_tokens": 0, "output_tokens": 0}
    completed = 0
    with _replacing(fs, [f"{root}/{OUTPUT_FILE}", f"{root}/{ERRORS_FILE}"]) as (out, err):
        for custom_id, group in request_groups(_in_input_order(parts[0])):
            if custom_id in failed:
                continue
            first = group[0]
            answer = request_answer(custom_id, group, (batch_id, str(first["model"]), endpoint))
            if isinstance(answer, str):
                failed[custom_id] = (int(first["line"]), answer)
                continue
            out.write(answer[0].encode("utf-8"))
            completed += 1
            usage["input_tokens"] += answer[1]["prompt_tokens"]
            usage["output_tokens"] += answer[1].get("completion_tokens", 0)
        crash_point("mid_answers")
        failures += [(line, failed_line(batch_id, cid, msg)) for cid, (line, msg) in failed.items()]
        for _, text in sorted(failures, key=lambda failure: failure[0]):
            err.write(text.encode("utf-8"))
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    total = completed + len(failures)
    requests = {"total": total, "completed": completed, "failed": len(failures)}
    return {"requests": requests, "usage": usage}


def _in_input_order(parts: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of the output parts (in name order) in input order: a shard's part and
    its retry rounds' parts (`part-00003.parquet`, `part-00003.r1.parquet`) merged by
    (line, index)."""
    for _, group in groupby(parts, key=lambda url: url.rsplit("/", 1)[-1].split(".", 1)[0]):
        runs = [output_rows([url], "parquet") for url in group]
        yield from runs[0] if len(runs) == 1 else heapq.merge(*runs, key=_place)


def _place(row: dict[str, Any]) -> tuple[int, int]:
    return int(row["line"]), int(row["index"])


def _bad_records(
    error_parts: list[str], batch_id: str
) -> tuple[list[tuple[int, str]], dict[str, tuple[int, str]]]:
    """The job's bad records: the error lines of bad request lines, as (line, error
    line); and the requests the model failed, by custom_id, as (line, message) — one
    per request, however many of its inputs failed."""
    failures: list[tuple[int, str]] = []
    failed: dict[str, tuple[int, str]] = {}
    for url in error_parts:
        for record in read_error_records(url):
            line, custom_id = int(record.get("line") or 0), record.get("id")
            message = str(record.get("message", ""))
            if record.get("stage") == "predict" and isinstance(custom_id, str):
                failed.setdefault(custom_id, (line, message))
            else:
                code = str(record.get("error"))
                failures.append((line, bad_line(batch_id, custom_id, line, code, message)))
    return failures, failed


@contextmanager
def _replacing(fs: Any, paths: list[str]) -> Iterator[list[Any]]:
    """Binary files that replace `paths` whole, one after the other, when the block ends
    without error (none is replaced before all are written)."""
    with ExitStack() as stack:
        files = [stack.enter_context(fs.open(f"{path}.tmp", "wb")) for path in paths]
        yield files
    for path in paths:
        move(fs, f"{path}.tmp", path)
