"""What a job's workers are told about profiling, decided once from its spec and plan."""

from __future__ import annotations

from thresher.profiles.sampling import sample_rate_for
from thresher.profiles.settings import MonitorSection
from thresher.sources import Plan
from thresher.worker.tasks import ProfileSetup

__all__ = ["profile_setup"]


def profile_setup(monitor: MonitorSection, plan: Plan) -> ProfileSetup | None:
    """The job's profiling, or None when `[monitor] profile = false`. The sample rate comes
    from every shard of the plan (not those left to run), so a resumed job samples as the
    uninterrupted one would."""
    if not monitor.profile:
        return None
    counts = [s.rows for s in plan.shards]
    rows = None if any(r is None for r in counts) else sum(int(r) for r in counts if r)
    return ProfileSetup(sample_rate_for(rows, monitor.sample_rows), monitor.segment_by)
