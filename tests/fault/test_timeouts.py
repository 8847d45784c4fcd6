"""Shards that hang: `run.shard_timeout` kills the stuck worker and the shard is retried.

A hang that happens once (the model sleeps on a sentinel row the first time only, a
marker file remembering that it did) costs one failed attempt and nothing else: the job
succeeds with exact output. A hang that happens every time exhausts `run.max_attempts`:
the job fails naming the shard, the store and `thresher status` say so, no `_SUCCESS`.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from harness import FIGURES, ROWS, FaultJob, make_job

HUNG_SHARD = 5  # rows 10,000-11,999: row groups of 2,000, one shard each
SENTINEL_ROW = 10_700  # in the shard's second batch, so it hangs after some progress
TIMEOUT = 3  # seconds; the hang is 30

HANGING_MODEL = """
import os
import time


class HangsOnce:
    def __init__(self, hang_on, marker, once=True, load_seconds=0.0):
        self.hang_on, self.marker, self.once = hang_on, marker, once
        self.load_seconds = load_seconds

    def setup(self):
        time.sleep(self.load_seconds)  # a large model takes a while to load

    def predict(self, batch):
        if (batch["x0"] == self.hang_on).any():
            if not (self.once and os.path.exists(self.marker)):
                open(self.marker, "a").close()
                time.sleep(30)
        return {"score": batch["x0"] * 2.0 + batch["x1"]}
"""


def hanging_job(root: Path, once: bool, load_seconds: float = 0.0) -> FaultJob:
    """The harness job (24k rows, 12 shards, 2 workers) with a model that hangs on one
    row of shard 5 (`once`: only the first time), and a short shard timeout with 2
    attempts."""
    job = make_job(root, "parquet")
    x0 = pq.read_table(root / "input.parquet", columns=["x0"]).column("x0")
    (root / "model.py").write_text(HANGING_MODEL)
    job.spec.write_text(
        '[source]\nuri = "input.parquet"\nid_column = "id"\nshard_bytes = 1024\n'
        '[model]\nkind = "python"\nuri = "model.py:HangsOnce"\nbatch_format = "numpy"\n'
        f"options = {{ hang_on = {x0[SENTINEL_ROW].as_py()!r}, "
        f'marker = "{root / "hung.marker"}", once = {str(once).lower()}, '
        f"load_seconds = {load_seconds!r} }}\n"
        "[batch]\nsize = 500\n"
        f"[run]\nworkers = 2\nshard_timeout = {TIMEOUT}\nmax_attempts = 2\n"
        '[sink]\nuri = "out/"\n'
    )
    return job


def attempts(job: FaultJob, job_id: str) -> list[tuple[int, int, str | None, str | None]]:
    """(shard, attempt number, outcome, message) of every attempt, from the store itself."""
    with closing(sqlite3.connect(job.store.removeprefix("sqlite:///"))) as db:
        rows = db.execute(
            "SELECT idx, number, outcome, message FROM thresher_attempts"
            " WHERE job_id = ? ORDER BY idx, number",
            (job_id,),
        ).fetchall()
    return [(int(r[0]), int(r[1]), r[2], r[3]) for r in rows]


def test_a_shard_that_hangs_once_is_retried_and_the_output_is_exact(tmp_path: Path) -> None:
    job = hanging_job(tmp_path, once=True)
    clock = time.monotonic()
    result = job.run()
    seconds = time.monotonic() - clock
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "hung.marker").exists(), "the model never reached the sentinel row"
    assert seconds < 30, f"took {seconds:.0f}s: the hung worker was not killed at the timeout"

    job_id = job.latest_job()
    failed = [a for a in attempts(job, job_id) if a[2] != "done"]
    FIGURES.append(f"{'hang once':<34} seconds={seconds:.1f} failed_attempts={len(failed)}")
    assert len(failed) == 1, failed
    shard, number, outcome, message = failed[0]
    assert (shard, number, outcome) == (HUNG_SHARD, 1, "failed")
    assert message and "run.shard_timeout" in message, message
    assert (HUNG_SHARD, 2, "done", None) in attempts(job, job_id)

    assert job.ids() == Counter(range(ROWS)), "rows lost or written twice"
    assert job.error_ids() == Counter()
    parts = sorted(job.out.glob("part-*.parquet"))
    output = pq.read_table(parts)
    assert output.column("id").to_pylist() == list(range(ROWS)), "not in input order"
    source = pq.read_table(tmp_path / "input.parquet")
    expected = source.column("x0").to_numpy() * 2.0 + source.column("x1").to_numpy()
    np.testing.assert_array_equal(output.column("score").to_numpy(), expected)
    assert job.stray_files() == []
    assert job.has_success()


def test_a_shard_that_always_hangs_exhausts_its_attempts_and_fails_the_job(
    tmp_path: Path,
) -> None:
    job = hanging_job(tmp_path, once=False)
    clock = time.monotonic()
    result = job.run()
    seconds = time.monotonic() - clock
    said = result.stdout + result.stderr
    assert result.returncode == 1, said[-3000:]
    assert f"shard {HUNG_SHARD} " in said and "failed after 2 attempt(s)" in said, said[-3000:]
    assert "run.shard_timeout" in said, said[-3000:]

    job_id = job.latest_job()
    tried = [a for a in attempts(job, job_id) if a[0] == HUNG_SHARD]
    FIGURES.append(f"{'hang always':<34} seconds={seconds:.1f} attempts_of_shard={len(tried)}")
    assert [(n, outcome) for _, n, outcome, _ in tried] == [(1, "failed"), (2, "failed")]
    assert all(m and "run.shard_timeout" in m for *_, m in tried), tried

    status = subprocess.run(
        [*job.cli(), "status", job_id], env=job.env(), capture_output=True, text=True, check=False
    )
    assert status.returncode == 0, status.stderr
    assert f"job {job_id}" in status.stdout and "failed" in status.stdout, status.stdout
    assert f"shard {HUNG_SHARD}: failed, 2 attempt(s)" in status.stdout, status.stdout
    assert "11/12 done, 1 failed" in status.stdout, status.stdout

    assert not job.has_success()
    assert job.stray_files(pending=job_id) == []
    # The other shards' rows are committed once each, waiting unpublished for a resume
    # (a failed job publishes nothing); the hung shard's are nowhere.
    hung = set(range(HUNG_SHARD * 2_000, (HUNG_SHARD + 1) * 2_000))
    assert job.ids() == Counter()
    assert job.ids(pending=job_id) == Counter(i for i in range(ROWS) if i not in hung)


def test_a_slow_model_load_is_not_taken_for_a_stuck_shard(tmp_path: Path) -> None:
    """The shard clock starts when the worker's model is loaded: a load longer than
    `run.shard_timeout` fails no attempt (it used to fail every shard, over and over)."""
    job = hanging_job(tmp_path, once=True, load_seconds=TIMEOUT + 2.0)
    (tmp_path / "hung.marker").touch()  # no hang: only the slow load
    result = job.run()
    assert result.returncode == 0, result.stderr[-3000:]
    tried = attempts(job, job.latest_job())
    FIGURES.append(f"{'slow model load':<34} attempts={len(tried)} (12 shards)")
    assert [outcome for _, _, outcome, _ in tried] == ["done"] * 12, tried
    assert job.ids() == Counter(range(ROWS))
    assert job.has_success()
