"""What the files and jobs APIs answer, as typed models: they document the responses in
the OpenAPI document (`/openapi.json`) and check that the routes answer what it says."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FileInfo(BaseModel):
    """An uploaded file. The server-side path is never shown."""

    id: str = Field(description="Pass it as `input_file_id` to POST /v1/jobs.")
    object: str = "file"
    filename: str = Field(description="The name the client sent (metadata only).")
    format: str = Field(description="jsonl, csv or parquet")
    bytes: int
    sha256: str
    created_at: str


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


class JobInfo(BaseModel):
    """A job's status, counts, progress and timings."""

    id: str
    object: str = "job"
    name: str
    status: str = Field(description="queued, running, succeeded, failed or cancelled")
    model: str | None = Field(description="The registered model it runs.")
    priority: int
    output_format: str | None
    request_counts: RequestCounts
    errors: int = Field(description="Bad input rows, each a record in the errors download.")
    progress: Progress
    created_at: str
    started_at: str | None
    finished_at: str | None
    seconds: float | None = Field(description="Run time of the last run.")
    rows_per_second: float | None
    message: str | None = Field(description="Why it failed or was cancelled.")
    results_url: str
    errors_url: str


class JobList(BaseModel):
    """One page of jobs, newest first."""

    object: str = "list"
    data: list[JobInfo]
    has_more: bool
    last_id: str | None = Field(description="Pass as `after` for the next page.")
