"""The request buffer: producers post single records, the service runs them in batches.

`POST /v1/requests` stores each record (`custom_id`, `model`, `input`) durably as
`waiting`. A flusher thread turns the waiting records of one tenant and model into a
batch job when `buffer.<model>.max_records` of them wait, or when the oldest has waited
`max_wait` seconds. When the job ends, each record gets its prediction or its error, and
`GET /v1/requests/{custom_id}` answers with it.

How a record is answered exactly once, whatever crashes when:

1. **Claim** (one transaction): up to `max_records` waiting records become `batched`
   with a new `batch_id` and no `job_id` yet. A record joins one batch only: the update
   takes only rows still `waiting`.
2. **Write** `data_dir/buffer/<batch_id>.jsonl` from the rows of that batch, under a
   temporary name renamed into place, so the file is whole or absent. It is written from
   the store, never from memory, so it can always be written again.
3. **Submit** the job with the idempotency key `thresher-buffer:<batch_id>`: a second
   submission of the batch returns the first job instead of making another.
4. **Link**: record the job id on the batch's rows.
5. **Settle** (the `on_job_finished` hook, one transaction): every row of the batch still
   `batched` becomes `done` with its output row or `failed` with its `_errors/` record (or
   the job's own error when the job left no answer for it), answered from the job's
   parts by `sinks.answers`, the one mechanism (and crash story) of every request's
   answer. Rows no longer `batched` are left alone, so running the hook twice changes
   nothing.

A crash after 1 leaves `batched` rows with no job id: at start (and every few seconds)
the flusher redoes 2-4 for them — the file is rewritten from the store if it is missing,
and the idempotency key turns a resubmission into the job already made. A crash after 4
but before 5 leaves `batched` rows whose job has ended: the same pass settles them. The
hook finds its batch from the job's input file name, so a job that ends before step 4
still settles its rows. Nothing is lost (rows leave `batched` only by being answered) and
nothing is doubled (one batch per row, one job per batch, one answer per row).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from thresher.loops import Strikes, start_loop
from thresher.service.config import BufferSettings
from thresher.service.errors import ServiceError, TooManyRequests
from thresher.service.routers.requests import router
from thresher.service.state import ServiceState
from thresher.service.submission import submit_job
from thresher.sinks import open_sink
from thresher.sinks.answers import Answering
from thresher.store import JobRecord, RequestState, StoreError, WaitingGroup

__all__ = ["Flusher", "router", "start_flusher"]

log = logging.getLogger("thresher.service.background.buffer")

# (tenant, job body, idempotency key) -> job id: how the flusher submits a batch's job
Submit = Callable[[str, dict[str, Any], str | None], str]
KEY_PREFIX = "thresher-buffer:"


def new_batch_id() -> str:
    """Sortable by time, unique without coordination: `batch-20261130-020304-a1b2c3d4`."""
    return f"batch-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(4)}"


class Flusher:
    """Turns waiting records into batch jobs and settles them when the jobs end."""

    def __init__(self, state: ServiceState, submit: Submit | None = None) -> None:
        self.state = state
        self.submit = submit or partial(submit_job, state)
        self.table = state.store.requests
        self.buffer_dir = state.buffer_dir
        self.strikes = Strikes("request buffer", state.config.quarantine_after)

    def flush_due(self) -> int:
        """Make a batch job of every group that is due; returns how many were made."""
        made = 0
        for group in self.table.waiting_groups():
            size = self._limits(group.model).max_records
            for _ in range(self._batches_due(group)):
                batch_id = new_batch_id()
                if not self.table.claim_batch(group.tenant, group.model, batch_id, size):
                    break
                self._try_submit(batch_id, group.tenant, group.model)
                made += 1
        return made

    def _try_submit(self, batch_id: str, tenant: str, model: str) -> None:
        """`submit_batch`, its failures counted: one that fails `quarantine_after` times
        in a row (a record that cannot be written) has its records answered failed, and
        the other batches go on (`reconcile` tries a failed one again)."""
        self.strikes.attempt(
            batch_id,
            partial(self.submit_batch, batch_id, tenant, model),
            partial(self._quarantine, batch_id),
        )

    def _quarantine(self, batch_id: str, reason: str) -> None:
        """Answer every record of a batch the flusher failed on too often, failed."""
        self.table.settle(batch_id, None, {}, {"stage": "buffer", "error": "quarantined",
                                               "message": reason})  # fmt: skip

    def _batches_due(self, group: WaitingGroup) -> int:
        limits = self._limits(group.model)
        waited = (datetime.now(UTC) - datetime.fromisoformat(group.oldest)).total_seconds()
        if waited >= limits.max_wait:
            return -(-group.count // limits.max_records)  # all of them, in full batches
        return group.count // limits.max_records

    def _limits(self, model: str) -> BufferSettings:
        return self.state.config.buffer.get(model) or BufferSettings()

    def submit_batch(self, batch_id: str, tenant: str, model: str) -> None:
        """Steps 2-4 for a claimed batch; safe to run again for the same batch."""
        path = self.buffer_dir / f"{batch_id}.jsonl"
        write_batch_file(path, self.table.batch_lines(batch_id))
        body = {
            "source": {"uri": str(path)},
            "model": model,
            "id_column": "custom_id",
            "output_format": "jsonl",
            "name": f"buffer {model}",
        }
        try:
            job_id = self.submit(tenant, body, KEY_PREFIX + batch_id)
        except ServiceError as exc:
            if isinstance(exc, TooManyRequests) and exc.retry_after is not None:
                # Over a limit that waiting lifts (queued_jobs, rows_per_day): the batch
                # stays unlinked and `reconcile` submits it again.
                log.info("buffered batch %s of tenant %s waits: %s", batch_id, tenant, exc)
                return
            # This batch can never make a job: answer its records.
            log.warning("buffered batch %s of tenant %s refused: %s", batch_id, tenant, exc)
            error = {"stage": "submit", "error": type(exc).__name__, "message": str(exc)}
            self.table.settle(batch_id, None, {}, error)
            return
        self.table.link(batch_id, job_id)

    def reconcile(self) -> None:
        """Finish what a crash interrupted: submit and link batches with no job yet, and
        settle batches whose job ended without the hook having run."""
        for batch_id, tenant, model in self.table.unlinked_batches():
            log.info("buffered batch %s has no job recorded; submitting it", batch_id)
            self._try_submit(batch_id, tenant, model)
        for batch_id, job_id in self.table.linked_batches():
            try:
                job = self.state.store.job(job_id)
            except StoreError:
                log.exception("buffered batch %s: its job %s is not in the store", batch_id, job_id)
                continue
            if job.state.finished:
                self.strikes.attempt(
                    batch_id, partial(self.job_finished, job), partial(self._quarantine, batch_id)
                )

    def batch_of(self, job: JobRecord) -> str | None:
        """The buffered batch a job runs, from its input file's name; None for other jobs."""
        uri = job.spec.source.uri
        path = Path(uri.removeprefix("file://"))
        if path.suffix != ".jsonl" or os.path.realpath(path.parent) != os.path.realpath(
            self.buffer_dir
        ):
            return None
        return path.stem

    def job_finished(self, job: JobRecord) -> None:
        """The `on_job_finished` hook: step 5 for a buffered batch's job."""
        batch_id = self.batch_of(job)
        if batch_id is None or not job.state.finished:
            return
        # Only the job the buffer submitted answers a batch, not another job over its file.
        if self.table.idempotency_key(job.id) != KEY_PREFIX + batch_id:
            return
        if self.table.batch_tenant(batch_id) != job.tenant:
            log.warning("job %s names batch %s of another tenant; ignored", job.id, batch_id)
            return
        lines = [str(line["custom_id"]) for line in self.table.batch_lines(batch_id)]
        settled = self.table.settle(batch_id, job.id, read_answers(job, lines), missing_answer(job))
        if settled:
            log.info("buffered batch %s: %d records answered by job %s", batch_id, settled, job.id)


def write_batch_file(path: Path, lines: list[dict[str, Any]]) -> None:
    """Write a batch's input file whole — via a temporary name, synced, then renamed — unless
    it is there already (a complete file, since only a rename puts it there)."""
    if path.exists():
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


Answers = dict[str, tuple[RequestState, dict[str, Any]]]
Answer = tuple[str | None, RequestState, dict[str, Any]]  # custom_id (None: no record's)


@dataclass(frozen=True)
class RecordAnswers:
    """Buffered records answered (`sinks.answers.Answering`'s shape): done with the
    record's output row less the id column, or failed with its bad record's stage, error
    and message. `line_ids` are the batch file's custom_ids, one per line: a bad record
    whose id could not be read (it failed decoding) is the record of its line."""

    line_ids: list[str]

    def request_of(self, record: dict[str, Any]) -> str | None:
        custom_id, line = record.get("id"), record.get("line")
        if custom_id is None and isinstance(line, int) and 1 <= line <= len(self.line_ids):
            return self.line_ids[line - 1]
        return None if custom_id is None else str(custom_id)

    def answer(self, custom_id: str, rows: list[dict[str, Any]]) -> Answer:
        output = {key: value for key, value in rows[0].items() if key != "custom_id"}
        return custom_id, RequestState.DONE, output

    def failure(self, custom_id: str | None, line: int, record: dict[str, Any]) -> Answer:
        error = {key: record.get(key) for key in ("stage", "error", "message")}
        return custom_id, RequestState.FAILED, error


def read_answers(job: JobRecord, line_ids: list[str]) -> Answers:
    """Each record's answer from a finished job's output and error parts, read through
    its sink, by the one rule of `sinks.answers` (a record with a bad record failed, even
    if an output row of it is there too); a record the job left out fails with
    `missing_answer`. `line_ids`: see `RecordAnswers`."""
    sink = open_sink(job.spec.sink)
    lines = {custom_id: line for line, custom_id in enumerate(line_ids, start=1)}
    records = Answering(RecordAnswers(line_ids), lines)
    records.add_records(sink.read_errors())
    answered = list(records.output(row for t in sink.read_output() for row in t.to_pylist()))
    missing = missing_answer(job)
    left_out = records.errors(lambda custom_id, _: (custom_id, RequestState.FAILED, missing))
    return {cid: (state, value) for cid, state, value in answered + left_out if cid is not None}


def missing_answer(job: JobRecord) -> dict[str, Any]:
    """The error of a record the job left unanswered (a failed shard, a cancelled job)."""
    message = job.message or "the batch job ended without an answer for this record"
    return {"stage": "job", "error": f"job {job.state.value}", "message": message}


def start_flusher(
    state: ServiceState,
    poll: float = 0.25,
    reconcile_every: float = 5.0,
    submit: Submit | None = None,
) -> Callable[[], None]:
    """Start the buffer's flusher thread and register its `on_job_finished` hook; returns
    the function that stops both. `submit` makes a batch's job (default: the service's
    own `submission.submit_job`)."""
    flusher = Flusher(state, submit)

    last_reconcile = [float("-inf")]

    def step() -> float:
        if time.monotonic() - last_reconcile[0] >= reconcile_every:
            last_reconcile[0] = time.monotonic()
            flusher.reconcile()
        flusher.flush_due()
        return poll

    state.on_job_finished.append(flusher.job_finished)
    stop_loop = start_loop("thresher-buffer", step, registry=state.loops)

    def stop() -> None:
        stop_loop()
        if flusher.job_finished in state.on_job_finished:
            state.on_job_finished.remove(flusher.job_finished)

    return stop
