"""A job template — the `POST /v1/jobs` body a schedule submits at each tick, or a
trigger for each set of new files — checked as the job it will make, when it is given:
one check for both, so neither a schedule's nor a trigger's job can carry a model the
server does not serve, a webhook it would not call (`thresher.notify.urls`) or an
input outside `allowed_roots`, to fail later in a background thread.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from thresher.errors import describe_errors
from thresher.notify.urls import check_webhook_url
from thresher.schedules.templates import fill_in
from thresher.service.config import ServerConfig
from thresher.service.errors import ServiceError
from thresher.service.policies.catalogs import check_catalog
from thresher.service.policies.roots import check_under_roots
from thresher.service.submission import JobRequest

__all__ = ["check_job_template"]


def check_job_template(
    config: ServerConfig, job: dict[str, Any], *, check_roots: bool = True
) -> list[str]:
    """Why `job` would not make a job, field by field (empty: it would): it must
    validate as a `POST /v1/jobs` body with a registered model, a webhook the server will
    call and (with `check_roots`) a `source.uri` or `source.files` under `allowed_roots`,
    which need not exist yet. A trigger's files are judged by its `watch` instead."""
    sample = fill_in(job, datetime.now(UTC), UTC)
    try:
        request = JobRequest.model_validate(sample)
    except ValidationError as exc:
        return describe_errors(exc, JobRequest)
    if request.model not in config.models:
        return [f"model: no model named {request.model!r}"]
    try:
        if request.notify is not None:
            check_webhook_url(request.notify.webhook, config.webhook_allow_private)
        if request.source is not None and request.source.format == "iceberg":
            check_catalog(request.source.options.get("catalog"), config.allowed_roots)
        if request.source is not None and check_roots:
            for uri in request.source.files or [request.source.uri or ""]:
                if request.source.format == "iceberg":
                    break  # a table's name, not a place: its catalog is checked above
                check_under_roots(uri, config.allowed_roots)
    except (ServiceError, ValueError) as exc:
        return [str(exc)]
    return []
