"""The publish gate, the coordinator's side: hold a job whose checks fail, and carry out
the decision about it (`approve`, `reject`).

Where it sits: every shard is committed and the profile saved, nothing is published.

    judge the checks (`monitor/gate.py`)         crash point `gate_judged`
      all pass -> publish as always (`Sink.finish`), `succeeded`
      any fail -> the store records `held` with the manifest (every check's name, bound,
                  observed value) and the reasons; the sink drops its staging, keeps the
                  committed parts unpublished: the previous output stays live

A crash before `held` is recorded leaves the job `running`; its resume finds every shard
done and judges again (the same counts, the same profile: the same verdict).

    approve: held -> approved (recorded first)   crash point `approve_decided`
             the sink's publish, as a passing job's (`Sink.finish`; a file sink's own
             crash point `mid_publish` inside)    crash point `approve_published`
             approved -> succeeded; then the success webhook, by the caller
    reject:  held -> rejected (recorded first)   crash point `reject_decided`
             the sink discards the committed parts (`HoldsOutput.discard`)

The decision is recorded before it acts, and each step can run again: a crash anywhere is
finished by the same command again (approve on `approved`, reject on `rejected`), and
once decided the other command is refused, so a half-published output is never discarded
nor a half-discarded one published. Both are idempotent: approve on a `succeeded` job and
reject on a `rejected` one do what is left (nothing) and answer the same.
"""

from __future__ import annotations

from typing import Any

from thresher.errors import StoreError
from thresher.faults import crash_point
from thresher.monitor.gate import failed_reasons, judge
from thresher.profiles.profile import Profile
from thresher.sinks import Sink, open_sink
from thresher.sinks.base import HoldsOutput
from thresher.sources import Plan, tell_published
from thresher.store import JobRecord, JobState, Store

__all__ = ["approve_job", "hold_if_failing", "reject_job"]


def hold_if_failing(
    store: Store, job_id: str, manifest: dict[str, Any], profile: Profile | None
) -> list[str]:
    """Judge the job's `[publish] checks` into `manifest["publish_checks"]`; when any
    fails, record the job `held` and return the reasons (empty: publish)."""
    record = store.job(job_id)
    if record.spec.publish.checks is None:
        return []
    results = judge(store, record, manifest, profile)
    manifest["publish_checks"] = [r.to_json() for r in results]
    reasons = failed_reasons(results)
    crash_point("gate_judged")
    if reasons:
        store.finish(job_id, JobState.HELD, manifest, "; ".join(reasons))
    return reasons


def approve_job(store: Store, job_id: str) -> JobRecord:
    """Publish held job `job_id`'s output exactly as a passing job's is published; returns
    its record, `succeeded`. StoreError for a job that is not held (nor approved, nor
    already published by an approve)."""
    record = store.job(job_id)
    if record.state == JobState.SUCCEEDED:
        return record  # published: by an approve that ran before, or never held
    if record.state == JobState.HELD:
        if not store.decisions.decide(job_id, JobState.HELD, JobState.APPROVED):
            return approve_job(store, job_id)  # decided meanwhile: answer as it stands
        crash_point("approve_decided")
    elif record.state != JobState.APPROVED:
        raise _undecidable(record, "approve")
    manifest = {**(record.manifest or {}), "approved": True}
    sink = _started(record)
    sink.finish(manifest)
    crash_point("approve_published")
    plan = Plan.from_json(record.plan)  # its source told, as a passing job's (Kafka offsets)
    tell_published(record.spec.source, record.spec.sink.keep_columns, plan)
    store.finish(job_id, JobState.SUCCEEDED, manifest, None)
    return store.job(job_id)


def reject_job(store: Store, job_id: str) -> JobRecord:
    """Discard held job `job_id`'s staged output (the previous output stays); returns its
    record, `rejected`. StoreError for a job that is not held (nor rejected)."""
    record = store.job(job_id)
    if record.state == JobState.HELD:
        if not store.decisions.decide(job_id, JobState.HELD, JobState.REJECTED):
            return reject_job(store, job_id)
        crash_point("reject_decided")
    elif record.state != JobState.REJECTED:
        raise _undecidable(record, "reject")
    sink = open_sink(record.spec.sink)
    assert isinstance(sink, HoldsOutput)  # a job with checks has such a sink (check_gate)
    sink.discard(job_id)
    return store.job(job_id)


def _started(record: JobRecord) -> Sink:
    """The job's sink, started as a resume starts it: stale staging removed, publishes
    other jobs' crashes cut short finished, and in overwrite mode refused when a later
    job's output has replaced the folder since (approving would put older over newer)."""
    sink = open_sink(record.spec.sink)
    sink.start(record.id, len(Plan.from_json(record.plan).shards), resume=True)
    return sink


def _undecidable(record: JobRecord, verb: str) -> StoreError:
    return StoreError(
        f"job {record.id} is {record.state.value}, not held: only a job its publish gate"
        f" held can be {'approved' if verb == 'approve' else 'rejected'}"
    )
