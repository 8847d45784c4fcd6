"""What the files and jobs APIs answer, as typed models: they document the responses in
the OpenAPI document (`/openapi.json`) and check that the routes answer what it says."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class FileInfo(BaseModel):
    """A file: OpenAI's file object, with thresher's format and sha256. The server-side
    path is never shown."""

    id: str = Field(description="Pass it as `input_file_id` to POST /v1/jobs or /v1/batches.")
    object: str = "file"
    bytes: int
    created_at: int = Field(description="Unix seconds.")
    filename: str = Field(description="The name the client sent (metadata only).")
    purpose: str = Field(description="batch, batch_output, user_data, …")
    status: str = "processed"
    expires_at: int | None = None
    format: str = Field(description="jsonl, csv or parquet")
    sha256: str


class FileList(BaseModel):
    object: str = "list"
    data: list[FileInfo]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: str = "file"
    deleted: bool = True


class RequestCounts(BaseModel):
    """Input rows read so far, and how many became results and errors."""

    total: int
    completed: int
    failed: int


class Progress(BaseModel):
    """Shards (slices of the input) committed, failed, and planned (0 until it starts)."""

    shards_done: int
    shards_failed: int
    shards_total: int


class PublishCheck(BaseModel):
    """One `[publish] checks` check as judged when the job's shards were all committed."""

    name: str
    bound: Any = Field(description="What the spec asked.")
    observed: Any = Field(description="What the job showed (null: not judged, see reason).")
    passed: bool
    reason: str


class JobInfo(BaseModel):
    """A job's status, counts, progress and timings."""

    id: str
    object: str = "job"
    name: str
    status: str = Field(
        description="queued, running, preempted (waiting to resume), succeeded, failed,"
        " cancelled, held (a publish check failed: approve or reject it), approved (being"
        " published) or rejected"
    )
    model: str | None = Field(description="The registered model it runs.")
    priority: int
    output_format: str | None
    output_table: dict[str, Any] | None = Field(
        None,
        description="A job writing a table: its format, uri, mode and the version (Delta) or"
        " snapshot id (Iceberg) it made, once published.",
    )
    request_counts: RequestCounts
    errors: int = Field(description="Bad input rows, each a record in the errors download.")
    progress: Progress
    created_at: str
    started_at: str | None
    finished_at: str | None
    seconds: float | None = Field(description="Run time of the last run.")
    rows_per_second: float | None
    message: str | None = Field(
        description="Why it failed, was cancelled, preempted or held (each failed check)."
    )
    waiting_for: str | None = Field(
        None, description="Why a queued or preempted job has not started: which limit."
    )
    slots: dict[str, int] | None = Field(
        None, description="The worker (`cpu`) and `gpu` slots a running job holds."
    )
    publish_checks: list[PublishCheck] | None = Field(
        None, description="Its `[publish] checks`, each judged, once every shard committed."
    )
    retry_rounds: int = Field(
        0, description="Rounds over its failed rows that ended (`POST .../retry-errors`)."
    )
    results_url: str
    errors_url: str


class JobList(BaseModel):
    """One page of jobs, newest first."""

    object: str = "list"
    data: list[JobInfo]
    has_more: bool
    last_id: str | None = Field(description="Pass as `after` for the next page.")


class FireTime(BaseModel):
    """A fire time, on the schedule's wall clock and in UTC."""

    local: str
    utc: str


class TickInfo(BaseModel):
    """One tick of a schedule and what came of it."""

    nominal_time: str = Field(description="The fire time, UTC (a manual tick: when asked).")
    outcome: str = Field(description="claimed, started, skipped, missed or failed")
    job_id: str | None
    message: str | None = Field(description="Why it was skipped, missed or failed.")
    manual: bool = Field(description="Triggered by hand, not by the cron.")
    backfill: str | None = Field(
        default=None, description="The backfill whose tick it is (GET /v1/backfills/{id})."
    )


class ScheduleInfo(BaseModel):
    """A schedule: when it fires, its policies, the job it starts, its next fire times."""

    object: str = "schedule"
    name: str
    declared: str = Field(description="api (the tenant's own) or config (the operator's)")
    cron: str
    timezone: str
    paused: bool
    paused_reason: str | None = Field(
        default=None, description="Why the ticker paused it (failing too often); resume clears it."
    )
    catchup: str
    max_catchup: int
    starting_deadline: float | None
    overlap: str
    job: dict[str, Any] = Field(description="The POST /v1/jobs body it submits.")
    next_fire_times: list[FireTime]
    error: str | None = Field(
        default=None,
        description="Why it will not run (a cron with no fire time within five years, kept"
        " from before such were refused); None when it will.",
    )
    last_tick: TickInfo | None
    created_at: str | None
    updated_at: str | None


class ScheduleList(BaseModel):
    object: str = "list"
    data: list[ScheduleInfo]


class TickList(BaseModel):
    object: str = "list"
    data: list[TickInfo]
