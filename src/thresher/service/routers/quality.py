"""`POST /v1/jobs/{id}/actuals` (labels for a job's predictions, as they arrive) and
`GET /v1/jobs/{id}/quality` (the job's metrics, counts, coverage and label lag), for the
tenant's own jobs: another tenant's job answers 404, as one that never was."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from thresher.errors import MonitorError
from thresher.monitor.actuals import ActualsPart, PartFile, add_actuals, add_file_part
from thresher.monitor.labels import from_records
from thresher.monitor.part_reader import PartLimits, PartTooLarge
from thresher.monitor.quality import Quality, job_quality
from thresher.service.background.isolated import ChildFailed, in_child
from thresher.service.errors import TooLarge, Unprocessable
from thresher.service.limits import Text
from thresher.service.policies.auth import Tenant
from thresher.service.routers.jobs import tenant_job
from thresher.service.state import ServiceState, StateDep
from thresher.service.uploads import find_file
from thresher.store import JobRecord

router = APIRouter(prefix="/v1/jobs", tags=["quality"])

# How long reading and joining one uploaded part may take before its child is ended.
PART_SECONDS = 600.0

Int64 = Annotated[int, Field(strict=True, ge=-(2**63), le=2**63 - 1)]
Id = Text | Int64
Label = StrictBool | Int64 | float | Text


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Actual(_Strict):
    """One label: the record's id (as the job's id column has it) and its true outcome."""

    id: Id
    label: Label


class ActualsRequest(_Strict):
    """Labels in the body (`records`), or in an uploaded file (`file_id`, Parquet, CSV or
    JSONL, with `id_column` and `label_column`). Exactly one of the two."""

    records: list[Actual] | None = Field(None, min_length=1, description="{id, label} pairs.")
    file_id: Text | None = Field(None, description="An id from POST /v1/files.")
    id_column: Text | None = Field(None, description="The file's id column (default: the job's).")
    label_column: Text = Field("label", description="The file's column of true outcomes.")
    prediction_column: Text | None = Field(
        None, description="The output column holding the prediction (default: the job's)."
    )

    @model_validator(mode="after")
    def _one_input(self) -> ActualsRequest:
        if (self.records is None) == (self.file_id is None):
            raise ValueError("records: give exactly one of records and file_id")
        return self


@router.post("/{job_id}/actuals", status_code=201, summary="Add labels to a job's predictions")
async def post_actuals(
    job_id: str, body: ActualsRequest, state: StateDep, tenant: Tenant
) -> ActualsPart:
    """Join labels to the succeeded job's predictions by its id column, exactly and
    idempotently: the same part again changes nothing (`new: false`), an id labelled
    before keeps its first label (`repeated`), an id the job never predicted is counted
    (`unknown`, with a few of them in `unknown_ids`). Answers with what this part did and
    the job's coverage after it."""
    return await run_in_threadpool(_add, state, tenant, job_id, body)


@router.get("/{job_id}/quality", summary="A job's quality, once actuals arrived")
async def get_quality(
    job_id: str,
    state: StateDep,
    tenant: Tenant,
    task: Annotated[
        Literal["classification", "regression"] | None,
        Query(description="Force the task (default: inferred from labels and predictions)."),
    ] = None,
) -> Quality:
    """Metrics over the job's labelled rows (classification: accuracy, precision, recall,
    F1 — binary of the positive class, or macro-averaged — ROC AUC, log loss, 10
    calibration bins; regression: MAE, RMSE, R²), with predicted and labelled ids,
    coverage, unknown and repeated ids, and the label lag of its parts."""
    return await run_in_threadpool(_quality, state, tenant, job_id, task)


def _add(state: ServiceState, tenant: str, job_id: str, body: ActualsRequest) -> ActualsPart:
    job = tenant_job(state, tenant, job_id)
    try:
        if body.records is None:
            return _add_file(state, tenant, job, body)
        records: list[dict[str, Any]] = [r.model_dump() for r in body.records]
        return add_actuals(state.store, job.id, from_records(records), body.prediction_column)
    except MonitorError as exc:
        raise Unprocessable([str(exc)]) from None


def _add_file(
    state: ServiceState, tenant: str, job: JobRecord, body: ActualsRequest
) -> ActualsPart:
    """The uploaded file read and joined in a child process, within the config's caps:
    413 past one, 422 for a file that is not a part (or that crashed its reader)."""
    assert body.file_id is not None
    upload = find_file(state.store, tenant, body.file_id)
    config = state.config
    limits = PartLimits(
        config.upload_max_rows,
        config.upload_max_decompressed_bytes,
        "upload_max_rows",
        "upload_max_decompressed_bytes",
    )
    file = PartFile(
        upload.path,
        body.id_column,
        body.label_column,
        upload.filename,
        limits,
        body.prediction_column,
    )
    try:
        return in_child(add_file_part, state.store.url, job.id, file, timeout=PART_SECONDS)
    except PartTooLarge as exc:
        raise TooLarge(str(exc)) from None
    except ChildFailed as exc:
        how = f"its reader {exc}" if exc.crashed else str(exc)
        raise Unprocessable([f"{upload.filename}: the file could not be read ({how})"]) from None
    except TimeoutError:
        took = f"reading it took longer than {PART_SECONDS:g} s; send it in smaller parts"
        raise Unprocessable([f"{upload.filename}: {took}"]) from None


def _quality(state: ServiceState, tenant: str, job_id: str, task: Any) -> Quality:
    job = tenant_job(state, tenant, job_id)
    try:
        return job_quality(state.store, job.id, task)
    except MonitorError as exc:
        raise Unprocessable([str(exc)]) from None
