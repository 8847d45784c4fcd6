"""The batch worker: a background thread that takes each OpenAI-style batch from
`validating` to its end.

- `validating`: the input file's request lines are checked (`thresher.openai.lines`); a file
  with problems fails the batch (`errors.data`, each with its code and line), a good one
  becomes the job's input rows (a request that fails on its own is kept aside, answered
  400 at the end; if every one does, there is no job: → `finalizing`) and a job, queued
  under an idempotency key made from the batch (so a worker that dies here and runs
  again makes the same job) → `in_progress`.
- `in_progress`: the job runs like any other (queue, priorities, resume after a crash).
  Past `expires_at` it is cancelled, and the batch ends `expired`.
- `cancelling` (`POST /v1/batches/{id}/cancel`): the job is cancelled; the batch ends
  `cancelled`.
- when the job has ended, `finalizing`: what its committed shards hold is published and
  written as OpenAI's output and error files (`thresher.sinks.openai_answers`, every request line in
  exactly one), recorded as `batch_output` files → `completed` (or `cancelled`,
  `expired`, `failed`). Every step can run again after a crash and ends the same.

A batch that ends calls the state's `on_batch_ended` hooks (its webhook events).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from thresher.faults import crash_point
from thresher.loops import Strikes, start_loop
from thresher.openai.lines import Prepared, prepare_lines, request_lines
from thresher.plan import worker_slots
from thresher.service import submission
from thresher.service.background.encoders import counting_tokens
from thresher.service.downloads import output_of
from thresher.service.errors import TooManyRequests
from thresher.service.state import ServiceState
from thresher.service.uploads import find_file
from thresher.sinks import open_sink
from thresher.sinks.openai_answers import Written, answer_lines, output_rows, write_answers
from thresher.sources.openai_batch import MIN_SPLIT_BYTES
from thresher.spec import SourceSection
from thresher.store import (
    BatchRow,
    BatchStatus,
    FileRecord,
    JobRecord,
    JobState,
    now,
)

log = logging.getLogger("thresher.service.background.batches")

POLL_SECONDS = 1.0
ENDS = {"batch_cancelled": BatchStatus.CANCELLED, "batch_expired": BatchStatus.EXPIRED}


class BatchWorker:
    def __init__(self, state: ServiceState) -> None:
        self.state = state
        self.table = state.store.batches
        self.strikes = Strikes("batch worker", state.config.quarantine_after)

    def step(self, clock: float | None = None) -> None:
        """Move every unfinished batch on as far as it can go now. A batch that raises (a
        line its results cannot be written for, a job that cannot be submitted) is counted
        and, after `quarantine_after` steps in a row, failed with the reason in
        `errors.data`; the other batches go on."""
        at = time.time() if clock is None else clock
        for batch in self.table.unfinished():
            self.strikes.attempt(
                batch.id, partial(self._advance, batch, at), partial(self._quarantine, batch)
            )

    def _quarantine(self, batch: BatchRow, reason: str) -> None:
        """Fail a batch the worker failed on too often (its job cancelled, if running)."""
        current = self.table.find(batch.id) or batch
        if current.job_id is not None and not self.state.store.job(current.job_id).state.finished:
            self.state.store.request_cancel(current.job_id)
        failure = {"code": "batch_failed", "message": reason, "param": None, "line": None}
        errors = {"object": "list", "data": [failure]}
        if self.table.move(batch.id, current.status, BatchStatus.FAILED, errors=errors):
            self.state.batch_ended(batch.id)

    def _advance(self, batch: BatchRow, clock: float) -> None:
        if batch.status == BatchStatus.VALIDATING:
            self._validate(batch)
            return
        if batch.job_id is None:  # every request failed on its own: no job to run
            self._finalize(batch, None, "batch_failed")
            return
        job = self.state.store.job(batch.job_id)
        expired = batch.expires_at is not None and clock > batch.expires_at
        if not job.state.finished and (batch.status == BatchStatus.CANCELLING or expired):
            self.state.store.request_cancel(job.id)
        if job.state.finished:
            unrun = (
                "batch_cancelled"
                if batch.cancelling_at
                else "batch_expired"
                if expired
                else "batch_failed"
            )
            self._finalize(batch, job, unrun)

    def _validate(self, batch: BatchRow) -> None:
        config = self.state.config
        source = find_file(self.state.store, batch.tenant, batch.input_file_id)
        dest = prepared_input(self.state, batch.id)
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        limits = (config.batch_max_requests, config.batch_max_bytes)
        kinds = {name: model.kind for name, model in config.models.items()}
        found = prepare_lines(Path(source.path), dest, batch.endpoint, kinds, limits)
        if found.problems:
            data = [p.public() for p in found.problems]
            errors = {"object": "list", "data": data, "more": found.more_problems}
            if self.table.move(batch.id, BatchStatus.VALIDATING, BatchStatus.FAILED, errors=errors):
                self.state.batch_ended(batch.id)
            return
        assert found.model is not None
        _write_rejected(rejected_input(self.state, batch.id), found)
        if not dest.stat().st_size:  # every request failed on its own: answered at once
            counts = {"total": found.requests, "completed": 0, "failed": 0}
            self.table.move(batch.id, BatchStatus.VALIDATING, BatchStatus.FINALIZING,
                            model=found.model, counts=counts)  # fmt: skip
            return
        try:
            job_id = self._submit(batch, found.model, dest)
        except TooManyRequests as exc:
            if exc.retry_after is None:
                raise
            log.info("batch %s waits: %s", batch.id, exc)  # over a limit that waiting lifts
            return
        counts = {"total": found.requests, "completed": 0, "failed": 0}
        moved = self.table.move(
            batch.id,
            BatchStatus.VALIDATING,
            BatchStatus.IN_PROGRESS,
            job_id=job_id,
            model=found.model,
            counts=counts,
        )
        if not moved:
            # Moved meanwhile: by another server sharing the store, which checked the same
            # lines and got this same job (a batch's job is submitted idempotently, by
            # `batch:<id>`) and now runs it; or cancelled while its lines were checked,
            # when the job is not wanted.
            current = self.table.find(batch.id)
            if current is None or current.job_id != job_id:
                self.state.store.request_cancel(job_id)

    def _submit(self, batch: BatchRow, model: str, rows: Path) -> str:
        section = self.state.config.models[model]
        body: dict[str, object] = {
            "source": {"uri": str(rows), "format": "jsonl"},
            "model": model,
            "id_column": "custom_id",
            "name": f"batch {batch.id}",
            "priority": self._priority(batch),
            "output_format": "parquet",  # vectors stay binary until the answers are written
        }
        options: dict[str, object] = {}
        if batch.endpoint == "/v1/embeddings":
            body["columns"] = ["input"]
            body["keep_columns"] = ["line", "index", "encoding_format", "dimensions"]
            options.update(counting_tokens(section))
        else:
            text = "messages" if batch.endpoint == "/v1/chat/completions" else "prompt"
            body["columns"] = [text, "params"]
            body["keep_columns"] = ["line", "index"]
            options = {f"{text}_column": text, "params_column": "params"}
        key = f"batch:{batch.id}"
        source = {"shard_bytes": request_shard_bytes(rows, worker_slots(self.state.config.run))}
        return submission.submit_job(
            self.state, batch.tenant, body, key, model_options=options, source_options=source
        )

    def _priority(self, batch: BatchRow) -> int:
        """The batch's priority, within its tenant's `max_priority` as the config says
        now (checked at create; a limit lowered since would refuse the job for ever)."""
        highest = self.state.config.limits(batch.tenant).max_priority
        return batch.priority if highest is None else min(batch.priority, highest)

    def _finalize(self, batch: BatchRow, job: JobRecord | None, unrun: str) -> None:
        if batch.status == BatchStatus.IN_PROGRESS:
            self.table.move(batch.id, BatchStatus.IN_PROGRESS, BatchStatus.FINALIZING)
            batch = self.table.find(batch.id) or batch
        if job is not None and job.state != JobState.SUCCEEDED:
            _publish_committed(job)
        written, ids = self._write(batch, job, unrun)
        counts, usage = written.manifest()["requests"], written.manifest()["usage"]
        end, errors = ENDS.get(unrun, BatchStatus.COMPLETED), None
        if job is not None and job.state == JobState.FAILED and not batch.cancelling_at:
            message = job.message or "the batch's job failed"
            failure = {"code": "batch_failed", "message": message, "param": None, "line": None}
            end, errors = BatchStatus.FAILED, {"object": "list", "data": [failure]}
        ended = self.table.move(
            batch.id,
            batch.status,
            end,
            counts=counts,
            usage=usage,
            errors=errors,
            output_file_id=ids["output"] if written.completed else None,
            error_file_id=ids["errors"] if written.failed else None,
        )
        if ended:
            crash_point("batch_ended")
            self.state.batch_ended(batch.id)

    def _write(
        self, batch: BatchRow, job: JobRecord | None, unrun: str
    ) -> tuple[Written, dict[str, str]]:
        """The output and error files, written (`sinks.openai_answers`, the one writer of
        request answers) and recorded; their file ids."""
        uploads = self.state.uploads_dir
        files = {kind: uploads / f"file-{batch.id}-{kind}.jsonl" for kind in ("output", "errors")}
        uploads.mkdir(mode=0o700, parents=True, exist_ok=True)
        lines = request_lines(prepared_input(self.state, batch.id))
        answering = answer_lines((batch.id, batch.model or "", batch.endpoint), lines)
        answering.add_records(_read_rejected(rejected_input(self.state, batch.id)))
        rows: Iterator[dict[str, Any]] = iter(())
        if job is not None:
            sink = output_of(job.spec.sink)
            answering.add_records(sink.read_errors())
            rows = output_rows(sink.published_parts(), sink.file_format)
        paths = (str(files["output"]), str(files["errors"]))
        written = write_answers(paths, answering, rows, unrun)
        return written, {kind: self._record(batch, path) for kind, path in files.items()}

    def _record(self, batch: BatchRow, path: Path) -> str:
        """The file at `path` as the tenant's `batch_output` file (once: its id is made
        from the batch, so a finalize run again finds it)."""
        import hashlib

        file_id = path.name.removesuffix(".jsonl")
        files = self.state.store.files
        if files.find(batch.tenant, file_id) is None:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            files.add(
                FileRecord(
                    file_id,
                    batch.tenant,
                    f"{batch.id}_{file_id.rsplit('-', 1)[-1]}.jsonl",
                    "jsonl",
                    path.stat().st_size,
                    digest,
                    str(path),
                    now(),
                    "batch_output",
                )
            )
        return file_id


def request_shard_bytes(rows: Path, slots: int) -> int:
    """The shard size for a batch's request rows: one shard per worker slot, as a plain
    JSONL input would be cut only past 1 MiB, and a request row costs a model call (a few
    thousand sentences are under 1 MiB: one worker of all the cores, where a process per
    core is faster, see `plan_placement`); but no shard under the `openai-batch`
    source's floor, nor over the default shard size."""
    default = int(SourceSection.model_fields["shard_bytes"].default)
    wanted = -(-rows.stat().st_size // max(slots, 1))
    return min(default, max(MIN_SPLIT_BYTES, wanted))


def prepared_input(state: ServiceState, batch_id: str) -> Path:
    """Where a batch's job input rows are written."""
    return state.data_dir / "batches" / f"{batch_id}.jsonl"


def rejected_input(state: ServiceState, batch_id: str) -> Path:
    """Where a batch's requests that failed on their own are kept, as bad records."""
    return state.data_dir / "batches" / f"{batch_id}.rejected.jsonl"


def _write_rejected(path: Path, found: Prepared) -> None:
    """The requests that failed on their own, whole (written again if validation runs
    again after a crash)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(p.record()) + "\n" for p in found.rejected))
    os.replace(tmp, path)


def _read_rejected(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _publish_committed(job: JobRecord) -> None:
    """Publish what a cancelled or failed batch job committed, so its finished requests
    are answered: the job's output folder is its alone."""
    sink = open_sink(job.spec.sink)
    if not Path(job.spec.sink.uri).exists():
        return  # it never started
    sink.start(job.id, max(job.shard_count, 1), resume=True)
    sink.finish({"job_id": job.id, "state": job.state.value, "partial": True})


def start_batches(state: ServiceState) -> Callable[[], None]:
    """Start the batch worker's thread, woken as a job ends (its `on_job_finished`
    hook: a batch whose job ended is finalized now, not at the next poll); returns its
    stop."""
    worker = BatchWorker(state)

    def job_finished(record: JobRecord) -> None:
        state.batches_waiting.set()

    def step() -> float:
        worker.step()
        return POLL_SECONDS

    stop_loop = start_loop(
        "thresher-batches", step, wake=state.batches_waiting, registry=state.loops
    )
    state.on_job_finished.append(job_finished)

    def stop() -> None:
        if job_finished in state.on_job_finished:
            state.on_job_finished.remove(job_finished)
        stop_loop()

    return stop
