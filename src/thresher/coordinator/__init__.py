"""The coordinator: one per job, in the CLI process or a service job process.

It alone touches the job store and the sink's commit side: it plans (through `plan/`),
hands shards to an executor, commits each finished shard through `commit.py`, and
writes the manifest. Workers only stage parts.
"""

from __future__ import annotations

from thresher.coordinator.commit import commit_retry_shard, commit_shard
from thresher.coordinator.job import JobResult, new_job_id, resume_job, run_job
from thresher.coordinator.retry import retry_errors

__all__ = [
    "JobResult",
    "commit_retry_shard",
    "commit_shard",
    "new_job_id",
    "resume_job",
    "retry_errors",
    "run_job",
]
