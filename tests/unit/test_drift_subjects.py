"""`thresher.drift` over real jobs run in this process (the in-process executor and the
memory sink), job names, and reference files profiled once and cached in the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import thresher
from thresher.monitor import DriftReport
from thresher.monitor import reference as reference_module
from thresher.store import open_store

ROWS = 6_000

MODEL = """
class Scorer:
    def predict(self, batch):
        return {"score": batch["x"] * 0.1, "label": (batch["x"] > 0).astype("int64")}
"""


def features(seed: int, shift: float = 0.0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": np.arange(ROWS),
            "x": rng.normal(shift, 1, ROWS),
            "z": rng.uniform(0, 1, ROWS),
        }
    )


def run_job(tmp_path: Path, name: str, table: pa.Table, **monitor: Any) -> str:
    path = tmp_path / f"{name}-{len(list(tmp_path.glob('*.parquet')))}.parquet"
    pq.write_table(table, path, row_group_size=1_000)
    (tmp_path / "scorer.py").write_text(MODEL)
    result = thresher.run(
        {
            "job": {"name": name},
            "source": {"uri": str(path), "id_column": "id", "shard_bytes": 4096},
            "model": {
                "kind": "python",
                "uri": f"{tmp_path / 'scorer.py'}:Scorer",
                "batch_format": "numpy",
            },
            "run": {"executor": "thresher.testing:in_process_executor"},
            "sink": {"uri": f"memory://{path.stem}", "format": "thresher.testing:memory_sink"},
            "monitor": monitor,
        }
    )
    assert result.succeeded, result.problems
    return result.job_id


def test_two_jobs_by_id_and_by_name(tmp_path: Path) -> None:
    first = run_job(tmp_path, "nightly", features(0))
    second = run_job(tmp_path, "nightly", features(1, shift=1.0))
    report = thresher.drift(first, second)
    assert isinstance(report, DriftReport)
    assert {c.name: c.verdict for c in report.columns} == {
        "x": "drift",
        "z": "ok",
        "score": "drift",
        "label": "drift",  # the class shares moved with x
    }
    assert report.verdict == "drift" and report.baseline.startswith(first)
    assert set(report.class_shares) == {"label"}
    by_name = thresher.drift(first, "nightly")  # the newest succeeded job of that name
    assert by_name.current == report.current
    assert thresher.drift(second, "nightly").verdict == "ok"  # itself


def test_a_reference_file_is_profiled_once_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    training = tmp_path / "training.parquet"
    pq.write_table(features(5).append_column("target", pa.array(np.zeros(ROWS))), training)
    job = run_job(tmp_path, "scoring", features(6, shift=1.0))
    report = thresher.drift(str(training), job)
    assert report.column("x").verdict == "drift" and report.column("z").verdict == "ok"
    assert set(report.removed) == {"id", "target"}  # the file's columns no job input has
    assert report.baseline == f"file {training}"

    def no_second_read(*_: object) -> None:
        raise AssertionError("the reference file was read again")

    with monkeypatch.context() as patch:
        patch.setattr(reference_module, "_profile_plan", no_second_read)
        again = thresher.drift(str(training), job)
    assert again.column("x").psi == report.column("x").psi  # the cached profile
    # A new version of the file is profiled again.
    pq.write_table(features(6, shift=1.0), training)
    assert thresher.drift(str(training), job).column("x").verdict == "ok"
    subjects = [r[0] for r in open_store().db.query("SELECT subject FROM thresher_profiles")]
    assert sum(s.startswith(f"file:{training}@") for s in subjects) == 2


def test_profiles_compare_directly_and_errors_say_what_to_give(tmp_path: Path) -> None:
    job = run_job(tmp_path, "scoring", features(0))
    profile = open_store().profiles.get(job)
    assert profile is not None
    assert thresher.drift(profile, profile).verdict == "ok"
    with pytest.raises(thresher.MonitorError, match="no job, succeeded job named, or file"):
        thresher.drift("no-such-thing", job)
    unprofiled = run_job(tmp_path, "quiet", features(1), profile=False)
    with pytest.raises(thresher.MonitorError, match="profile = false"):
        thresher.drift(job, unprofiled)


def test_a_reference_file_is_profiled_by_the_jobs_segments(tmp_path: Path) -> None:
    def with_region(table: pa.Table, north: float, seed: int) -> pa.Table:
        rng = np.random.default_rng(seed)
        region = np.where(rng.uniform(size=ROWS) < north, "north", "south")
        return table.append_column("region", pa.array(region))

    training = tmp_path / "training.parquet"
    pq.write_table(with_region(features(5), 0.5, 0), training)
    job = run_job(tmp_path, "scoring", with_region(features(6), 0.8, 1), segment_by="region")
    report = thresher.drift(str(training), job)
    assert report.segment_by == "region" and report.verdict == "drift"  # region moved
    segments = {s.key: s for s in report.segments}
    assert set(segments) == {"north", "south"}
    assert segments["north"].row_share.baseline == pytest.approx(0.5, abs=0.02)
    assert segments["north"].row_share.current == pytest.approx(0.8, abs=0.02)
    assert {c.name for c in segments["north"].columns} >= {"x", "z"}
    assert segments["north"].verdict == "ok"
    assert report.column("region").verdict == "drift"  # the segment column itself moved
