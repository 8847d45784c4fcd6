"""The `_SUCCESS` manifest: what a job read, wrote and rejected, with what, how fast."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from thresher.models import model_fingerprint
from thresher.plan import Placement
from thresher.sources import Plan
from thresher.spec import JobSpec
from thresher.store import Totals


@dataclass(frozen=True)
class RunFacts:
    """What this run of a job did: how it was placed, when it started, how long it took,
    and how many rows it read (a resumed run reads only the shards left)."""

    placement: Placement
    started: datetime
    seconds: float
    rows: int
    batch_size: int | None = None  # the size most rows ran at (tuned, or fixed)
    native: bool | None = None  # the model's native path ran (None: it has no choice)


def build_manifest(
    spec: JobSpec, job_id: str, totals: Totals, run: RunFacts, plan: Plan | None = None
) -> dict[str, Any]:
    """Counts come from the store, so a resumed job's manifest covers every run of it;
    the rate is this run's (rows it read over its wall time). `source_read`: what the
    plan's source said it reads (a table trigger's job: the versions' added rows, or the
    whole table and why)."""
    spec_json = spec.model_dump_json()
    scheduled = {"schedule": spec.job.schedule, "nominal_time": spec.job.nominal_time}
    read = plan.read_note() if plan is not None else None
    return {
        "job_id": job_id,
        "name": spec.job.name,
        **(scheduled if spec.job.schedule else {}),
        "rows_in": totals.rows_in,
        "rows_out": totals.rows_out,
        "rows_error": totals.rows_error,
        "shards": totals.shards_done,
        "shards_failed": totals.shards_failed,
        "model": {"kind": spec.model.kind, **model_fingerprint(spec.model)},
        "spec_sha256": hashlib.sha256(spec_json.encode()).hexdigest(),
        "spec": json.loads(spec_json),
        **({"source_read": read} if read is not None else {}),
        "batch_size": run.batch_size or spec.batch.size,
        "batch_size_setting": spec.batch.size,
        "workers": run.placement.workers,
        "threads_per_worker": run.placement.threads,
        "worker_in_process": run.placement.inline,
        "workers_forked": run.placement.forked,
        "device": run.placement.device,
        "native": run.native,
        "placement": run.placement.describe(),
        "started_at": run.started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "seconds": round(run.seconds, 3),
        "rows_per_second": round(run.rows / run.seconds, 1) if run.seconds > 0 else None,
    }


def error_rate_problem(spec: JobSpec, totals: Totals) -> list[str]:
    """The `errors.max_error_rate` verdict: empty, or one problem saying by how much."""
    limit = spec.errors.max_error_rate
    if limit is None or totals.rows_in == 0:
        return []
    rate = totals.rows_error / totals.rows_in
    if rate <= limit:
        return []
    return [
        f"{totals.rows_error:,} of {totals.rows_in:,} rows were bad ({rate:.2%}), more than "
        f"errors.max_error_rate = {limit:.2%}; see the error files"
    ]
