"""A job killed mid-run and resumed has the profile an uninterrupted run has: each shard's
profile is committed with the shard, once, and the job's is merged in shard order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import make_job
from test_kill import KILLED, finish

from thresher.store import open_store


def described(store: str, job_id: str) -> dict[str, Any]:
    return open_store(store).profiles.of_job(job_id).describe()


def without_quantiles(profile: dict[str, Any]) -> dict[str, Any]:
    """Everything but the KLL sketches' figures, which draw random bits as they compact
    (so a shard run twice holds other, equally good, points)."""
    return {
        name: {k: v for k, v in column.items() if not k.startswith("quantile")}
        for name, column in profile["columns"].items()
    }


@pytest.mark.parametrize("fault", ["after_commit:3", "worker_after_stage:5"])
def test_a_resumed_jobs_profile_equals_an_uninterrupted_runs(tmp_path: Path, fault: str) -> None:
    golden = make_job(tmp_path / "golden", "parquet")
    assert golden.run().returncode == 0
    want = described(golden.store, golden.latest_job())

    job = make_job(tmp_path / "killed", "parquet")
    assert job.run(fault=fault).returncode in (KILLED, 1)
    finish(job)
    got = described(job.store, job.latest_job())

    assert got["rows"] == want["rows"] == 24_000
    assert without_quantiles(got) == without_quantiles(want)  # counts, moments, categories
    # The quantiles agree within the two sketches' rank errors, compared as ranks.
    mine = open_store(job.store).profiles.of_job(job.latest_job()).columns
    theirs = open_store(golden.store).profiles.of_job(golden.latest_job()).columns
    for name, column in theirs.items():
        if column.quantiles is None or column.quantiles.is_empty():
            continue
        mine_q = mine[name].quantiles
        assert mine_q is not None
        bound = column.quantiles.normalized_rank_error(False) + mine_q.normalized_rank_error(False)
        for q in (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99):
            rank = column.quantiles.get_rank(mine_q.get_quantile(q))
            assert abs(rank - q) <= bound, (name, q, rank, bound)
