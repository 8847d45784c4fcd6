"""OpenAI's output and error files for an `openai-batch` source's job:
`sink.format = "openai-batch"` (the default for such a source), `sink.uri` a folder.

    answers/output.jsonl     one line per request answered, in input order
    answers/errors.jsonl     one line per request not answered, in line order
    answers/part-*.parquet   the job's own rows (custom_id, line, index, the embedding
                             or generated text and token counts), as a parquet sink's
    answers/_errors/, _SUCCESS, _thresher.json   as a parquet sink's

Both files are written by the service's own writer (`sinks.openai_answers`, over
`sinks.answers`, the one mechanism and crash story of every request's answer): an error
line for a request the model could not answer (`response.status_code` 400, its
`body.error`), and for a bad line (not JSON, a repeated custom_id, …),
`"response": null` with `error` = `{code, message, line}`, OpenAI's code and the 1-based
line. Every request line is in exactly one of the two files, once.

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
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import pyarrow as pa

from thresher.errors import SinkError
from thresher.openai.settings import ERRORS_FILE, OUTPUT_FILE
from thresher.sinks.files import FilePartTarget, FileSink
from thresher.sinks.openai_answers import answer_lines, output_rows
from thresher.sinks.openai_answers import write_answers as write_answers_files
from thresher.sinks.parts import StagedPart, read_error_records
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
    output parts `parts[0]` (Parquet) and error parts `parts[1]`, through the one writer
    of request answers (`sinks.openai_answers`); `names` = (batch id: the job's, endpoint).
    Returns the counts for the manifest."""
    batch_id, endpoint = names
    answering = answer_lines((batch_id, "", endpoint))
    for url in parts[1]:
        answering.add_records(read_error_records(url))
    paths = (f"{folder}/{OUTPUT_FILE}", f"{folder}/{ERRORS_FILE}")
    return write_answers_files(paths, answering, _in_input_order(parts[0])).manifest()


def _in_input_order(parts: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of the output parts (in name order) in input order: a shard's part and
    its retry rounds' parts (`part-00003.parquet`, `part-00003.r1.parquet`) merged by
    (line, index)."""
    for _, group in groupby(parts, key=lambda url: url.rsplit("/", 1)[-1].split(".", 1)[0]):
        runs = [output_rows([url], "parquet") for url in group]
        yield from runs[0] if len(runs) == 1 else heapq.merge(*runs, key=_place)


def _place(row: dict[str, Any]) -> tuple[int, int]:
    return int(row["line"]), int(row["index"])
