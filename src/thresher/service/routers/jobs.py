"""`/v1/jobs`: submit a job, list and read a tenant's jobs, cancel, resume or retry the
errors of one, approve or reject one its publish checks held, download its results and
errors. Another tenant's job answers 404, exactly as a job that never was."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from thresher.coordinator import gate
from thresher.errors import SinkError, ThresherError
from thresher.service import submission
from thresher.service.background.job_process import retry_in_background
from thresher.service.background.slots import capacity, retry_request
from thresher.service.downloads import (
    MEDIA_TYPES,
    job_error_parts,
    output_of,
    result_parts,
    stream_errors,
    stream_parts,
)
from thresher.service.errors import Conflict, NotFound, TooManyRequests
from thresher.service.policies.auth import Tenant
from thresher.service.policies.disclosure import private_roots, public_message
from thresher.service.schemas import JobInfo, JobList, Progress, RequestCounts
from thresher.service.state import ServiceState, StateDep
from thresher.service.submission import JobRequest
from thresher.service.table_outputs import written_table
from thresher.spec import ModelSection
from thresher.store import JobRecord, JobState, Lease, ShardState, StoreError, retry_lease

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

Format = Literal["jsonl", "csv", "parquet"]
MAX_KEY_LENGTH = 255  # an Idempotency-Key
RETRY_AFTER_SECONDS = 5  # a retry round refused for want of worker slots: ask again then
RETRIABLE = (JobState.SUCCEEDED, JobState.FAILED)  # a job whose errors a round retries


def tenant_job(state: ServiceState, tenant: str, job_id: str) -> JobRecord:
    """The tenant's job `job_id`; NotFound for any other (or none)."""
    try:
        record = state.store.job(job_id)
    except StoreError:
        record = None
    if record is None or record.tenant != tenant:
        raise NotFound(f"no job {job_id!r}")
    return record


def describe(state: ServiceState, record: JobRecord, held: list[Lease] | None = None) -> JobInfo:
    """What the API shows of a job: status, counts, progress, timings (its slots among
    the leases `held`, read once for a page of jobs; else read here)."""
    totals = state.store.totals(record.id)
    manifest = record.manifest or {}
    return JobInfo(
        id=record.id,
        name=record.name,
        status=record.state.value,
        model=_model_name(state, record.spec.model),
        priority=record.priority,
        output_format=record.spec.sink.format,
        output_table=written_table(record.spec.sink, manifest),
        request_counts=RequestCounts(
            total=totals.rows_in, completed=totals.rows_out, failed=totals.rows_error
        ),
        errors=totals.rows_error,
        progress=Progress(
            shards_done=totals.shards_done,
            shards_failed=totals.shards_failed,
            shards_total=record.shard_count,
        ),
        created_at=record.created_at,
        started_at=manifest.get("started_at"),
        finished_at=record.finished_at,
        seconds=manifest.get("seconds"),
        rows_per_second=manifest.get("rows_per_second"),
        message=public_message(state, record.message),
        waiting_for=record.wait_reason,
        slots=_slots(state, record, held),
        publish_checks=manifest.get("publish_checks"),
        retry_rounds=len(manifest.get("retries") or []),
        results_url=f"/v1/jobs/{record.id}/results",
        errors_url=f"/v1/jobs/{record.id}/errors",
    )


def _slots(
    state: ServiceState, record: JobRecord, held: list[Lease] | None
) -> dict[str, int] | None:
    """The slots the job holds: its own lease's while its coordinator runs, or its retry
    round's from the round's start until its process has ended (each gives them back a
    moment after the job's end is recorded: a finished job may still hold them)."""
    if record.state == JobState.QUEUED:
        return None  # holds none
    lease = state.store.leases.of_job(record.id, held)
    return None if lease is None else {"cpu": lease.cpu, "gpu": lease.gpu}


def _model_name(state: ServiceState, section: ModelSection) -> str | None:
    """The registered name of the model a job runs (None if the config no longer has it)."""
    for name, model in state.config.models.items():
        if model.model_dump(mode="json") == section.model_dump(mode="json"):
            return name
    return None


@router.post("", status_code=201, summary="Submit a job")
def submit_job(
    job: JobRequest,
    state: StateDep,
    tenant: Tenant,
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=MAX_KEY_LENGTH,
            description="Submitting the same body again with the same key returns the first "
            "job; the same key with another body is 422.",
        ),
    ] = None,
) -> JobInfo:
    """Queue a job over an uploaded file (`input_file_id`) or server-side input under the
    server's `allowed_roots` (`source.uri`, or exactly the files `source.files` lists),
    with a model registered on the server."""
    body = job.model_dump(mode="json", exclude_unset=True)
    job_id = submission.submit_job(state, tenant, body, idempotency_key)
    return describe(state, state.store.job(job_id))


@router.get("", summary="List jobs, newest first")
def list_jobs(
    state: StateDep,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[str | None, Query(description="The last id of the previous page.")] = None,
) -> JobList:
    """A page of the tenant's jobs; pass the page's `last_id` as `after` for the next."""
    cursor = tenant_job(state, tenant, after) if after is not None else None
    ids = state.store.views.tenant_job_ids(tenant, limit + 1, cursor)
    held = state.store.leases.held()
    page = [describe(state, state.store.job(job_id), held) for job_id in ids[:limit]]
    return JobList(data=page, has_more=len(ids) > limit, last_id=page[-1].id if page else None)


@router.get("/{job_id}", summary="A job's status, counts and progress")
def get_job(
    job_id: str,
    state: StateDep,
    tenant: Tenant,
) -> JobInfo:
    """Status (`queued`, `running`, `preempted`, `succeeded`, `failed`, `cancelled`,
    `held`, `approved`, `rejected`), why it is held (`publish_checks`), why it waits
    (`waiting_for`), request counts, shards done of total, timings and the number of bad
    records.
    """
    return describe(state, tenant_job(state, tenant, job_id))


@router.post("/{job_id}/cancel", summary="Cancel a job")
def cancel_job(
    job_id: str,
    state: StateDep,
    tenant: Tenant,
) -> JobInfo:
    """Stop a queued or running job (a running one stops within a second); a finished
    job is left as it is."""
    record = tenant_job(state, tenant, job_id)
    if _cancel_if_queued(state, job_id):
        state.job_finished(state.store.job(job_id))  # the scheduler never sees this one
    elif not record.state.finished:
        state.store.request_cancel(job_id)
    return describe(state, state.store.job(job_id))


@router.post("/{job_id}/resume", summary="Resume a failed or cancelled job")
def resume_job(job_id: str, state: StateDep, tenant: Tenant) -> JobInfo:
    """Run the job's unfinished shards again from its stored plan, its committed shards
    kept (every row still once); it waits in the queue like a preempted job. 409 unless
    it failed or was cancelled, its coordinator has stopped and no retry round of it is
    starting or ending."""
    record = tenant_job(state, tenant, job_id)
    if not state.store.queue.reopen(job_id, "resumed by request"):
        raise Conflict(f"job {job_id} is {record.state.value}; only a failed or cancelled job"
                       " whose coordinator (or retry round) has stopped is resumed")  # fmt: skip
    return describe(state, state.store.job(job_id))


@router.post(
    "/{job_id}/retry-errors", status_code=202, summary="Run a finished job's failed rows again"
)
def retry_job_errors(job_id: str, state: StateDep, tenant: Tenant) -> JobInfo:
    """Start a retry round, as `thresher retry-errors` does: the rows the model rejected
    (stage `predict`) or whose file could not be fetched (`fetch`) run again through the
    job's model, each once, into its output or back into its errors (decode errors stay:
    no model fixes them). The job is `running` until the round ends, then `succeeded` —
    or `failed` while its error rate still does not allow it; `retry_rounds` counts the
    rounds that ended. 409 unless it succeeded or failed with every shard done. The round
    takes its job's worker slots as a job would: 429 (with Retry-After) while they are
    not free, or while another round of it is starting or ending."""
    record = tenant_job(state, tenant, job_id)
    if record.state not in RETRIABLE:
        raise Conflict(f"job {job_id} is {record.state.value}; only a finished job's errors"
                       " are retried")  # fmt: skip
    if any(s.state != ShardState.DONE for s in state.store.shards(job_id)):
        raise Conflict(f"job {job_id} has shards that are not done; resume it first")
    grant = state.store.leases.acquire(retry_request(state.config, record), capacity(state.config))
    if not grant.granted and state.store.leases.lease(retry_lease(job_id)) is not None:
        raise TooManyRequests(  # asked twice at once, or a round's process still ending
            f"a retry round of job {job_id} is starting or ending; ask again in a moment",
            retry_after=1,
        )
    if not grant.granted:
        raise TooManyRequests(
            f"job {job_id}'s retry round needs worker slots: {grant.reason}; ask again later",
            retry_after=RETRY_AFTER_SECONDS,
        )
    if state.store.job(job_id).state not in RETRIABLE:
        state.store.leases.release(retry_lease(job_id))  # resumed meanwhile: the queue's now
        raise Conflict(f"job {job_id} was resumed meanwhile; its errors wait for it to end")
    retry_in_background(state.store, record, grant.cpu)
    return describe(state, record)


@router.post("/{job_id}/approve", summary="Publish a job its publish checks held")
def approve_job(
    job_id: str,
    state: StateDep,
    tenant: Tenant,
) -> JobInfo:
    """Publish a `held` job's output exactly as a passing job's is published, then send
    its success webhook. Again on a job it published: the same answer; on a job not held,
    409."""
    tenant_job(state, tenant, job_id)
    try:
        record = gate.approve_job(state.store, job_id)
    except ThresherError as exc:
        raise Conflict(public_message(state, str(exc)) or "cannot approve") from exc
    state.job_finished(record)  # its end hooks, as when a job ends: recorded once each
    return describe(state, record)


@router.post("/{job_id}/reject", summary="Discard a job its publish checks held")
def reject_job(
    job_id: str,
    state: StateDep,
    tenant: Tenant,
) -> JobInfo:
    """Discard a `held` job's staged output; the previous output stays. Again on a job it
    rejected: the same answer; on a job not held, 409."""
    tenant_job(state, tenant, job_id)
    try:
        record = gate.reject_job(state.store, job_id)
    except ThresherError as exc:
        raise Conflict(public_message(state, str(exc)) or "cannot reject") from exc
    state.job_finished(record)
    return describe(state, record)


def _cancel_if_queued(state: ServiceState, job_id: str) -> bool:
    """Cancel the job if it is still queued, atomically against the scheduler's claim."""
    return state.store.queue.cancel_if_queued(job_id)


@router.get("/{job_id}/results", summary="Download a job's results")
def get_results(
    job_id: str,
    state: StateDep,
    tenant: Tenant,
    fmt: Annotated[
        Format | None, Query(alias="format", description="Default: the job's format.")
    ] = None,
) -> StreamingResponse:
    """The result rows of a succeeded job, in input order, as one file."""
    record = tenant_job(state, tenant, job_id)
    if record.state != JobState.SUCCEEDED:
        raise Conflict(f"job {job_id} is {record.state.value}; results come when it succeeds")
    try:
        output = output_of(record.spec.sink)
    except SinkError as exc:
        raise Conflict(str(exc)) from None
    stored, parts = output.file_format, result_parts(output)
    wanted = fmt or stored
    return _download(stream_parts(parts, stored, wanted), wanted, f"{job_id}-results")


@router.get("/{job_id}/errors", summary="Download a job's bad records")
def get_errors(
    job_id: str,
    state: StateDep,
    tenant: Tenant,
    fmt: Annotated[Format | None, Query(alias="format", description="Default: jsonl.")] = None,
) -> StreamingResponse:
    """One record per bad input row (file, line or row, stage, error, message, raw text),
    once the job has ended."""
    record = tenant_job(state, tenant, job_id)
    if not record.state.finished:
        raise Conflict(f"job {job_id} is {record.state.value}; errors come when it ends")
    wanted = fmt or "jsonl"
    try:
        parts = job_error_parts(record.spec.sink, record.id)
    except SinkError as exc:
        raise Conflict(str(exc)) from None
    chunks = stream_errors(parts, wanted, private_roots(state))
    return _download(chunks, wanted, f"{job_id}-errors")


def _download(chunks: Iterator[bytes], wanted: str, stem: str) -> StreamingResponse:
    return StreamingResponse(
        chunks,
        media_type=MEDIA_TYPES[wanted],
        headers={"Content-Disposition": f'attachment; filename="{stem}.{wanted}"'},
    )
