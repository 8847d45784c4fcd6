"""`GET /v1/jobs/{id}/profile`: a tenant's job's profile (see `thresher profile`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from thresher.errors import MonitorError
from thresher.service.errors import Conflict, NotFound
from thresher.service.policies.auth import Tenant
from thresher.service.routers.jobs import tenant_job
from thresher.service.state import StateDep

router = APIRouter(prefix="/v1/jobs", tags=["monitoring"])


@router.get("/{job_id}/profile", summary="A job's profile of its inputs and outputs")
def get_profile(job_id: str, state: StateDep, tenant: Tenant) -> dict[str, Any]:
    """Per model input and output column: rows, nulls, NaN and inf counts, min, max,
    mean, std, quantiles (with the sketch's rank error), the most frequent values and
    distinct count of categoricals, and a probability histogram of outputs in [0, 1];
    the same per segment with `[monitor] segment_by`. 404 until the job has succeeded
    (or when it ran with `[monitor] profile = false`); 409 for a profile a newer thresher
    wrote, which this one cannot read."""
    record = tenant_job(state, tenant, job_id)
    try:
        profile = state.store.profiles.get(record.id)
    except MonitorError as exc:
        raise Conflict(str(exc)) from None
    if profile is None:
        raise NotFound(f"job {job_id} has no profile (yet): it has not succeeded, or ran"
                       " with [monitor] profile = false")  # fmt: skip
    return profile.describe()
