"""Drift alerts: when a job ends, its profile against its baseline, and a signed message
to `[monitor] alert_webhook` when the verdict is `alert_on` or worse.

    {"event": "monitor.drift", "job_id": "20261202-020000-9f8e7d", "name": "nightly",
     "baseline": "20261201-020000-a1b2c3 (nightly)", "verdict": "drift",
     "columns": [{"name": "income", "verdict": "drift", "psi": 0.41}],
     "thresholds": {"psi_warn": 0.1, "psi_drift": 0.25, "bins": 10, "fdr": 0.05}}

`event` is `monitor.warn` or `monitor.drift`; the delivery is recorded once per job and
event (its idempotency key), signed and retried like a job's webhook, and sent by the
service and by `thresher run` alike. The baseline is `[monitor] baseline` (a job id, a
job name, or a reference file), else the newest earlier succeeded job of the same name;
the first run of a name has none, and sends no alert.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict

from thresher.errors import ThresherError
from thresher.monitor.drift_report import VERDICTS, DriftReport
from thresher.monitor.subjects import compare_subjects, job_subject, resolve
from thresher.store import JobRecord, JobState, Store

__all__ = ["alert_message", "baseline_of", "job_drift"]

log = logging.getLogger("thresher.monitor.alerts")


def baseline_of(store: Store, job: JobRecord) -> str | None:
    """What the job is compared with: its `[monitor] baseline`, else the newest succeeded
    job of its name (and tenant) that started before it; None for the first."""
    return job.spec.monitor.baseline or store.views.latest_succeeded(job.name, job.tenant, job)


def job_drift(store: Store, job: JobRecord, baseline: str | None = None) -> DriftReport | None:
    """The job against `baseline` (default: `baseline_of`), or None without one."""
    against = baseline or baseline_of(store, job)
    if against is None:
        return None
    segment_by = job.spec.monitor.segment_by
    return compare_subjects(resolve(store, against, segment_by), job_subject(store, job))


def alert_message(store: Store, job: JobRecord) -> tuple[str, str, str] | None:
    """(event, url, JSON body) of the job's drift alert, or None: no `alert_webhook`, not
    succeeded, no baseline, or a verdict below `alert_on`. A comparison that cannot be
    made (a baseline file gone, say) is logged, not raised: the job's own webhook still goes."""
    monitor = job.spec.monitor
    if monitor.alert_webhook is None or job.state != JobState.SUCCEEDED:
        return None
    try:
        report = job_drift(store, job)
    except ThresherError as exc:
        log.warning("no drift alert for job %s: %s", job.id, exc)
        return None
    if report is None or VERDICTS.index(report.verdict) < VERDICTS.index(monitor.alert_on):
        return None
    event = f"monitor.{report.verdict}"
    body = {
        "event": event,
        "job_id": job.id,
        "name": job.name,
        "baseline": report.baseline,
        "verdict": report.verdict,
        "columns": [
            {"name": c.name, "verdict": c.verdict, "psi": c.psi}
            for c in report.columns
            if c.verdict != "ok"
        ],
        "thresholds": asdict(report.thresholds),
    }
    return event, monitor.alert_webhook, json.dumps(body)
