"""`/metrics` in Prometheus' text format, and `/healthz`.

`/metrics` shows jobs by state, rows read, written and rejected, the rate of each
running job (rows of its committed shards over the time since its first shard started),
each schedule's ticks by outcome, the files each trigger has taken, waiting jobs
(queued or preempted) by priority, and this host's worker and GPU slots in use (and
free, for the whole host's view only: the free slots tell every tenant's use).

What it covers depends on who asks: a tenant's token shows that tenant's jobs alone (no
other tenant's job ids or volumes); a token of a tenant in `metrics_operators` shows every
job in the store, for the operator's Prometheus; and with `metrics_public = true` every
job is shown to anyone, with no token.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from thresher.service.policies.auth import Credentials, authenticate
from thresher.service.schedules import every_schedule
from thresher.service.state import ServiceState, StateDep
from thresher.store import JobState

log = logging.getLogger("thresher.service.routers.metrics")

router = APIRouter(tags=["operations"])

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@router.get(
    "/healthz",
    summary="Liveness: the server answers, its store is readable, its loops are running",
    response_model=None,
)
def healthz(state: StateDep, loops: bool = False) -> dict[str, Any] | JSONResponse:
    """`{"status": "ok"}` (200) while the store answers a query and every background loop
    (`thresher.loops`: the ticker, watcher, batch worker, request buffer, scheduler,
    heartbeat) ended its last pass well. `{"status": "degraded", "loops": {...}}` (still
    200: the server serves, and its supervisor is restarting the loop; a restart of the
    process would not mend what a loop keeps failing on) when a loop's last pass failed
    or one has hung, each loop with its `last_success`, `failures` in a row, `restarts`
    and `last_error`; a monitor alerts on the status. `?loops=true` adds the loops to an
    ok answer too. 503 `{"status": "unavailable"}` when the store does not answer."""
    try:
        state.store.db.query("SELECT 1")  # the one query a store of any kind answers
    except Exception:
        log.exception("/healthz: the store does not answer")
        return JSONResponse({"status": "unavailable"}, status_code=503)
    if state.loops.degraded():
        return {"status": "degraded", "loops": state.loops.report()}
    return {"status": "ok", "loops": state.loops.report()} if loops else {"status": "ok"}


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=PlainTextResponse,
    description="Jobs by state, row totals and running jobs' rows/s: the caller's own jobs, "
    "or every tenant's for a token of one of the server's `metrics_operators`. Needs a "
    "bearer token unless the server's `metrics_public` is true.",
)
def metrics(
    credentials: Credentials,
    state: StateDep,
) -> PlainTextResponse:
    """The metrics text, for Prometheus to scrape."""
    return PlainTextResponse(render(state, _scope(credentials, state)), media_type=CONTENT_TYPE)


def _scope(credentials: Credentials, state: ServiceState) -> str | None:
    """The tenant whose jobs the caller may see, or None for every tenant's."""
    if state.config.metrics_public:
        return None
    tenant = authenticate(credentials, state)
    return None if tenant in state.config.metrics_operators else tenant


def render(state: ServiceState, tenant: str | None = None) -> str:
    """Every metric of the tenant's jobs (of all jobs with None), as Prometheus' text
    exposition format."""
    lines: list[str] = []
    _jobs_by_state(state, tenant, lines)
    _row_totals(state, tenant, lines)
    _running_rates(state, tenant, lines)
    _ticks(state, tenant, lines)
    _trigger_files(state, tenant, lines)
    _queue_and_slots(state, tenant, lines)
    return "\n".join(lines) + "\n"


def _metric(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _jobs_by_state(state: ServiceState, tenant: str | None, lines: list[str]) -> None:
    counts = state.store.views.job_counts(tenant)
    _metric(lines, "thresher_jobs", "gauge", "Jobs in the store, by state.")
    lines += [f'thresher_jobs{{state="{s.value}"}} {int(counts.get(s.value, 0))}' for s in JobState]


def _row_totals(state: ServiceState, tenant: str | None, lines: list[str]) -> None:
    row = state.store.views.done_row_totals(tenant)
    for name, value, what in zip(
        ("rows_in", "rows_out", "rows_error"),
        row,
        ("read", "written to outputs", "sent to error files"),
        strict=True,
    ):
        _metric(lines, f"thresher_{name}_total", "counter", f"Rows {what}.")
        lines.append(f"thresher_{name}_total {int(value)}")


def _running_rates(state: ServiceState, tenant: str | None, lines: list[str]) -> None:
    rows = state.store.views.running_job_progress(tenant)
    _metric(
        lines,
        "thresher_job_rows_per_second",
        "gauge",
        "Rows per second of each running job (committed shards since its first start).",
    )
    clock = datetime.now(UTC)
    for job_id, started, rows_in in rows:
        seconds = (clock - datetime.fromisoformat(started)).total_seconds()
        rate = int(rows_in) / seconds if seconds > 0 else 0.0
        lines.append(f'thresher_job_rows_per_second{{job="{job_id}"}} {rate:.3f}')


def _ticks(state: ServiceState, tenant: str | None, lines: list[str]) -> None:
    """Ticks by schedule and outcome: a tenant sees its own schedules' and the config's
    run for it."""
    counts = state.store.ticks.counts()
    if tenant is not None:
        mine = {s.key for s in every_schedule(state.config, state.store, tenant=tenant)}
        counts = {k: n for k, n in counts.items() if k[0] in mine or k[0].startswith(f"{tenant}/")}
    _metric(lines, "thresher_ticks_total", "counter", "Schedule ticks, by schedule and outcome.")
    for (schedule, outcome), count in sorted(counts.items()):
        lines.append(
            f'thresher_ticks_total{{schedule="{_label(schedule)}",outcome="{outcome}"}} {count}'
        )


def _label(value: str) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _trigger_files(state: ServiceState, tenant: str | None, lines: list[str]) -> None:
    """Files each trigger has taken (those of the tenant's triggers), by its ledger key
    (a config trigger's name, `tenant/name` for a tenant's own)."""
    from thresher.service.triggers import every_trigger

    seen = state.store.triggers.files_seen()
    _metric(lines, "thresher_trigger_files_seen_total", "counter", "Files taken by each trigger.")
    for watched in every_trigger(state.config, state.store, tenant=tenant):
        key = _label(watched.key)
        lines.append(
            f'thresher_trigger_files_seen_total{{trigger="{key}"}} {seen.get(watched.key, 0)}'
        )


def _queue_and_slots(state: ServiceState, tenant: str | None, lines: list[str]) -> None:
    """Waiting jobs and slots in use: a tenant's own, and the slots free here only for
    the whole host's view (free slots are the capacity less every tenant's use)."""
    waiting = state.store.queue.waiting_by_priority(tenant)
    _metric(lines, "thresher_queue_length", "gauge", "Jobs waiting (queued or preempted).")
    lines += [f'thresher_queue_length{{priority="{p}"}} {n}' for p, n in waiting.items()]
    used, capacity = state.store.leases.used(tenant=tenant), state.config.capacity
    for kind, held, total in (("cpu", used.cpu, capacity.cpu), ("gpu", used.gpu, capacity.gpu)):
        _metric(lines, f"thresher_{kind}_slots_used", "gauge", f"{kind} slots leased here.")
        lines.append(f"thresher_{kind}_slots_used {held}")
        if tenant is None:
            _metric(lines, f"thresher_{kind}_slots_free", "gauge", f"{kind} slots free here.")
            lines.append(f"thresher_{kind}_slots_free {max(0, total - held)}")
