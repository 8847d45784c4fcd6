"""`GET /v1/jobs/{id}/drift`: a job's columns against a baseline job's, from their profiles
(the same report as `thresher drift --json`). Both jobs are the caller's tenant's: another
tenant's job, by id or by name, answers 404 as a job that never was."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from thresher.errors import MonitorError
from thresher.monitor.subjects import compare_subjects, find_job, job_subject
from thresher.service.errors import BadRequest, Conflict, NotFound
from thresher.service.policies.auth import Tenant
from thresher.service.routers.jobs import tenant_job
from thresher.service.state import StateDep

router = APIRouter(prefix="/v1/jobs", tags=["monitor"])

MAX_NAME = 255  # a job id or name
MAX_COLUMNS = 1_000


@router.get("/{job_id}/drift", summary="A job's drift against a baseline job")
def job_drift(
    job_id: str,
    state: StateDep,
    tenant: Tenant,
    baseline: Annotated[
        str | None,
        Query(
            max_length=MAX_NAME,
            description="A job id, or a job name (its newest succeeded job); default: the"
            " job's [monitor] baseline.",
        ),
    ] = None,
    columns: Annotated[
        list[str] | None,
        Query(max_length=MAX_COLUMNS, description="Compare only these columns."),
    ] = None,
) -> dict[str, Any]:
    """Per column PSI on the baseline's frozen deciles, Jensen-Shannon distance (base 2),
    Wasserstein-1 over the baseline's std, KS with its error bound and chi-square for
    categories, Benjamini-Hochberg-adjusted p-values, verdicts by the job's `[monitor]`
    thresholds, the prediction class shares, and the same per segment. 409 while either
    job has no profile (not finished, or run with `[monitor] profile = false`)."""
    current = tenant_job(state, tenant, job_id)
    named = baseline or current.spec.monitor.baseline
    if not named:
        raise BadRequest("baseline: give ?baseline=<job id or name> (or set [monitor] baseline)")
    record = find_job(state.store, named, tenant)
    if record is None:
        raise NotFound(f"no job and no succeeded job named {named!r}")
    try:
        report = compare_subjects(
            job_subject(state.store, record), job_subject(state.store, current), columns
        )
    except MonitorError as exc:
        raise Conflict(str(exc)) from exc
    return report.to_json()
