"""What a drift comparison's BASELINE or CURRENT names, found: a job id, a job name (its
newest succeeded job: "last night's run of `nightly`"), or a reference file — tried in
that order — and its profile."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from thresher.errors import MonitorError
from thresher.monitor.drift import compare_profiles
from thresher.monitor.drift_report import DriftReport
from thresher.monitor.reference import reference_profile
from thresher.profiles.profile import Profile
from thresher.profiles.settings import MonitorSection
from thresher.store import JobRecord, Store, StoreError

__all__ = ["Subject", "compare_subjects", "drift_of", "find_job", "job_subject", "resolve"]


@dataclass(frozen=True)
class Subject:
    """One side of a comparison: how the report names it, its profile, and the job's
    `[monitor]` section (None for a file)."""

    label: str
    profile: Profile
    monitor: MonitorSection | None = None


def find_job(store: Store, what: str, tenant: str | None = None) -> JobRecord | None:
    """The job with id `what`, else the newest succeeded job named `what`; of `tenant`
    only, when given (another tenant's job is as none)."""
    try:
        record = store.job(what)
    except StoreError:
        record = None
    if record is not None and (tenant is None or record.tenant == tenant):
        return record
    newest = store.views.latest_succeeded(what, tenant)
    return store.job(newest) if newest is not None else None


def job_subject(store: Store, record: JobRecord) -> Subject:
    """The job's side of a comparison; MonitorError when it has no profile."""
    profile = store.profiles.get(record.id)
    if profile is None:
        why = (
            f"it is {record.state.value}"
            if record.state.value != "succeeded"
            else "it ran with [monitor] profile = false"
        )
        raise MonitorError(f"job {record.id} has no profile: {why}")
    label = f"{record.id} ({record.name})" if record.name else record.id
    return Subject(label, profile, record.spec.monitor)


def resolve(store: Store, what: str, segment_by: str | None = None) -> Subject:
    """BASELINE or CURRENT as `thresher drift` takes it. A reference file is profiled
    (by `segment_by` too, when given) on first use, and cached."""
    with contextlib.suppress(StoreError):
        return job_subject(store, store.job(what))
    if "://" in what or os.path.exists(what):
        return Subject(f"file {what}", reference_profile(store, what, segment_by))
    record = find_job(store, what)
    if record is None:
        raise MonitorError(
            f"no job, succeeded job named, or file {what!r}: give a job id (thresher status),"
            " a job name, or the path of a Parquet, CSV or JSONL file"
        )
    return job_subject(store, record)


def compare_subjects(
    baseline: Subject, current: Subject, columns: Sequence[str] | None = None
) -> DriftReport:
    """The drift report of two sides, by the current job's `[monitor]` thresholds (the
    baseline job's when the current is a file; the defaults for two files)."""
    monitor = current.monitor or baseline.monitor
    names = (baseline.label, current.label)
    return compare_profiles(baseline.profile, current.profile, monitor, columns, names)


def drift_of(
    store: Store, baseline: str, current: str, columns: Sequence[str] | None = None
) -> DriftReport:
    """`thresher drift BASELINE CURRENT`: both found (`resolve`), then compared. A
    reference-file baseline is profiled by the current job's `segment_by`, if any."""
    now = resolve(store, current)
    then = resolve(store, baseline, now.profile.segment_by)
    return compare_subjects(then, now, columns)
