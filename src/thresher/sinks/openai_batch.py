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
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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
from thresher.sinks.publish import PUBLISH, PendingOutput
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
        if retry_round is not None:
            raise SinkError(
                "retry-errors: an openai-batch sink's files answer the batch file once; run"
                " the batch again (a bad line fails the same way again)"
            )
        self.job_id = job_id
        self.files.start(job_id, shard_count, resume)
        return f"{self.files.root}/{ERRORS_FILE}"

    def part_target(self) -> FilePartTarget:
        return self.files.part_target()

    def commit(self, output: StagedPart | None, errors: StagedPart | None) -> None:
        self.files.commit(output, errors)

    def finish(self, manifest: dict[str, Any]) -> None:
        """Write the output and error files among the job's pending parts (unless its
        publish is recorded already: then they are there), then publish them all."""
        job_id = self._job()
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
    with _replacing(fs, f"{root}/{OUTPUT_FILE}") as out:
        for custom_id, group in request_groups(output_rows(parts[0], "parquet")):
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
    with _replacing(fs, f"{root}/{ERRORS_FILE}") as err:
        for _, text in sorted(failures, key=lambda failure: failure[0]):
            err.write(text.encode("utf-8"))
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    total = completed + len(failures)
    requests = {"total": total, "completed": completed, "failed": len(failures)}
    return {"requests": requests, "usage": usage}


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
def _replacing(fs: Any, path: str) -> Iterator[Any]:
    """A binary file that replaces `path` whole when the block ends without error."""
    with fs.open(f"{path}.tmp", "wb") as f:
        yield f
    move(fs, f"{path}.tmp", path)
