"""A job's charts on its dashboard page, drawn by the HTML report's own chart code
(monitor/report/charts.py): its rows done over time (from its shards' attempts), its
drift against its baseline or the run of its name before it (the report's PSI chart),
and the quality of the runs of its name once labels arrived (the report's trend).

Each is an SVG document the page shows as an image: matplotlib's SVG styles itself
inline, which the page's Content-Security-Policy forbids, while an image is a document of
its own (it runs no script) with a policy that allows only its own styles. Charts need
matplotlib (the `monitor` extra); without it the page shows none.
"""

from __future__ import annotations

import importlib.util
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from thresher.errors import ThresherError
from thresher.service.errors import NotFound
from thresher.service.routers.jobs import tenant_job
from thresher.service.state import ServiceState, StateDep
from thresher.service.ui.frame import signed_in
from thresher.store import JobRecord

router = APIRouter(prefix="/ui", include_in_schema=False)
SVG_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def can_draw() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def charts_of(state: ServiceState, record: JobRecord) -> list[tuple[str, str]]:
    """The (chart, caption) pairs a job's page shows: those with something to draw."""
    if not can_draw():
        return []
    shown = []
    if any(a["finished_at"] for a in state.store.views.attempts(record.id)):
        shown.append(("throughput", "Rows done over time"))
    baseline = _baseline(state, record) if record.state.value == "succeeded" else None
    if baseline is not None:
        shown.append(("drift", f"Drift against {baseline.id} ({baseline.name})"))
    if state.store.actuals.parts(record.id):
        shown.append(("quality", f"Quality over the runs of {record.name}"))
    return shown


@router.get("/jobs/{job_id}/charts/{chart}.svg")
def job_chart(job_id: str, chart: str, request: Request, state: StateDep) -> Response:
    session = signed_in(request, state)
    if session is None:
        return Response(status_code=401, headers=SVG_HEADERS)
    draw = {"throughput": _throughput, "drift": _drift, "quality": _quality}.get(chart)
    try:
        record = tenant_job(state, session.tenant, job_id)
        svg = draw(state, record) if draw and can_draw() else None
    except (NotFound, ThresherError):
        svg = None
    if svg is None:
        return Response(status_code=404, headers=SVG_HEADERS)
    return Response(svg, media_type="image/svg+xml", headers=SVG_HEADERS)


def _throughput(state: ServiceState, record: JobRecord) -> str | None:
    """Rows done over time: each shard's rows at the moment its attempt committed."""
    from thresher.monitor.report import charts

    attempts = state.store.views.attempts(record.id)
    rows = {s.index: s.rows_in or 0 for s in state.store.shards(record.id)}
    done = sorted(
        (_at(a["finished_at"]), rows.get(a["index"], 0))
        for a in attempts
        if a["finished_at"] and a["outcome"] == "done"
    )
    if not attempts or not done:
        return None
    start = min(_at(a["started_at"]) for a in attempts)
    seconds, totals, total = [0.0], [0.0], 0.0
    for when, count in done:
        total += count
        seconds.append((when - start).total_seconds())
        totals.append(total)
    return charts.over_time(seconds, totals, "Rows done", "rows")


def _drift(state: ServiceState, record: JobRecord) -> str | None:
    from thresher.monitor.report.build import psi_chart
    from thresher.monitor.subjects import compare_subjects, job_subject

    baseline = _baseline(state, record)
    if baseline is None:
        return None
    report = compare_subjects(job_subject(state.store, baseline), job_subject(state.store, record))
    return psi_chart(report)


def _baseline(state: ServiceState, record: JobRecord) -> JobRecord | None:
    """What a job is compared with: its `[monitor] baseline`, else the run of its name
    before it (last night's), when that one has a profile."""
    from thresher.monitor.subjects import find_job

    store, named = state.store, record.spec.monitor.baseline
    if named:
        found = find_job(store, named, record.tenant)
    else:
        before = store.views.latest_succeeded(record.name, record.tenant, before=record)
        found = store.job(before) if before else None
    return found if found is not None and store.profiles.get(found.id) is not None else None


def _quality(state: ServiceState, record: JobRecord) -> str | None:
    from thresher.monitor.report.quality import quality_part

    return quality_part(state.store, record)[1]


def _at(stamp: Any) -> datetime:
    return datetime.fromisoformat(str(stamp))
