"""A job of one shard runs its worker as a thread of the coordinator (`local` picks the
inline executor), through the real CLI: the model loads in the CLI's own process, the
output is exact, a stuck shard fails at `run.shard_timeout`, a cancel stops it at the
next chunk, and a crash of the worker's code (now the coordinator's) is resumed with
every row once."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .support import THRESHER, latest_job, run_manifest, start_run, store_env

pytestmark = pytest.mark.e2e

ROWS = 20_000

MODEL = """
import os
import time


class Scaled:
    def __init__(self, pid_file, sleep_on=-1.0, sleep=0.0, per_batch=0.0):
        self.pid_file, self.sleep_on, self.sleep = pid_file, sleep_on, sleep
        self.per_batch = per_batch

    def setup(self):
        with open(self.pid_file, "a") as f:
            f.write(f"{os.getpid()}\\n")

    def predict(self, batch):
        time.sleep(self.per_batch)
        if (batch["x"] == self.sleep_on).any():
            time.sleep(self.sleep)
        return {"y": batch["x"] * 3.0}
"""


def write_job(
    root: Path, shards: int = 1, batch: int = 1000, rows: int = ROWS, **options: float
) -> Path:
    x = np.arange(rows, dtype=np.float64)
    pq.write_table(pa.table({"id": np.arange(rows), "x": x}), root / "in.parquet")
    (root / "model.py").write_text(MODEL)
    options_toml = ", ".join(f"{k} = {v!r}" for k, v in options.items())
    spec = root / "job.toml"
    spec.write_text(
        f'[source]\nuri = "in.parquet"\nid_column = "id"\nshard_rows = {rows // shards}\n'
        '[model]\nkind = "python"\nuri = "model.py:Scaled"\nbatch_format = "numpy"\n'
        f'options = {{ pid_file = "{root / "pids"}"{", " if options else ""}{options_toml} }}\n'
        f"[batch]\nsize = {batch}\n"
        f"[run]\nworkers = {shards}\nshard_timeout = 2\nmax_attempts = 3\n"
        '[sink]\nuri = "out/"\n'
    )
    return spec


def output_ids(root: Path) -> Counter[int]:
    parts = sorted((root / "out").glob("part-*.parquet"))
    return Counter(pq.read_table(parts).column("id").to_pylist()) if parts else Counter()


@pytest.mark.parametrize("shards", [1, 2])
def test_one_shard_runs_in_the_coordinators_process_and_more_in_workers(
    tmp_path: Path, shards: int
) -> None:
    spec = write_job(tmp_path, shards)
    proc = start_run(tmp_path, spec)
    said, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, said
    manifest = run_manifest(tmp_path)
    pids = {int(p) for p in (tmp_path / "pids").read_text().split()}
    if shards == 1:
        assert manifest["worker_in_process"] is True
        assert pids == {proc.pid}, "the model was not loaded in the CLI's own process"
        assert "1 worker in this process" in said
    else:
        assert manifest["worker_in_process"] is False
        assert proc.pid not in pids and len(pids) == 2
    out = pq.read_table(sorted((tmp_path / "out").glob("part-*.parquet")))
    assert out.column("id").to_pylist() == list(range(ROWS))
    np.testing.assert_array_equal(out.column("y").to_numpy(), np.arange(ROWS) * 3.0)


def test_a_stuck_inline_shard_fails_at_the_timeout_not_retried(tmp_path: Path) -> None:
    spec = write_job(tmp_path, sleep_on=12_345.0, sleep=20.0)
    clock = time.monotonic()
    proc = start_run(tmp_path, spec)
    said, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, said
    assert time.monotonic() - clock < 15, "the stuck shard was not given up at the timeout"
    assert "run.shard_timeout" in said and "failed after 1 attempt(s)" in said, said
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_a_cancel_stops_an_inline_shard_at_its_next_chunk(tmp_path: Path) -> None:
    # Chunks of 8,192 rows (worker.shard.READ_WINDOW) in batches of 4,096, half a second
    # each: a chunk a second, 8 in all, so the cancel lands mid-shard even when the
    # `thresher cancel` process takes seconds to start (3 chunks were too few under CI's load).
    spec = write_job(tmp_path, batch=4096, rows=60_000, per_batch=0.5)
    proc = start_run(tmp_path, spec)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pids").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.2)  # the first chunk done
    job = latest_job(tmp_path)
    assert job, "the job was never recorded"
    cancelled = subprocess.run(
        [THRESHER, "cancel", job], env=store_env(tmp_path), capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert cancelled.returncode == 0, cancelled.stderr
    clock = time.monotonic()
    said, _ = proc.communicate(timeout=60)
    assert time.monotonic() - clock < 8, "the inline worker ran on past the cancel"
    assert "cancelled" in said, said
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    assert output_ids(tmp_path) == Counter(), "a cancelled job published rows"


def test_a_crash_in_the_inline_worker_is_resumed_exactly_once(tmp_path: Path) -> None:
    spec = write_job(tmp_path)
    crashed = start_run(tmp_path, spec, fault="worker_after_stage:0")
    crashed.communicate(timeout=120)
    assert crashed.returncode == -9, "the crash point did not take the coordinator down"
    job = latest_job(tmp_path)
    assert job, "the crashed job was never recorded"
    resumed = subprocess.run(
        [THRESHER, "resume", job], cwd=tmp_path, env=store_env(tmp_path),
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert output_ids(tmp_path) == Counter(range(ROWS)), "rows lost or written twice"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="threads or processes needs two cores")
def test_a_models_next_job_tries_threads_then_takes_the_faster(tmp_path: Path) -> None:
    """No `run.workers`: the first job of the model runs as processes, the next tries
    threads in the CLI's process, and the third takes whichever finished sooner and says
    why (plan/history.py)."""
    spec = write_job(tmp_path, shards=2)
    text = spec.read_text().replace("workers = 2\n", "")
    spec.write_text(text.replace('uri = "out/"', 'uri = "out/"\nforce = true'))
    placements = []
    for _ in range(3):
        (tmp_path / "pids").unlink(missing_ok=True)
        proc = start_run(tmp_path, spec)
        said, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, said
        manifest = run_manifest(tmp_path)
        pids = {int(p) for p in (tmp_path / "pids").read_text().split()}
        assert (pids == {proc.pid}) is manifest["worker_in_process"]
        assert manifest["placement"] in said
        placements.append(manifest["placement"])
        assert output_ids(tmp_path) == Counter(range(ROWS))
    first, second, third = placements
    cores = os.cpu_count() or 1
    assert first.startswith(f"2 worker(s) x {cores // 2} thread(s), forked")
    assert second == (
        f"1 worker in this process x {cores} thread(s)"
        " (threads tried: only processes measured for this model so far)"
    )
    winner = "threads" if third.startswith("1 worker in this process") else "processes"
    assert f"({winner} measured faster for this model: threads " in third
    # `thresher tune` measures the model with the threads the next job would run with.
    tuned = subprocess.run(
        [THRESHER, "tune", str(spec), "--sizes", "1000"], cwd=tmp_path,
        env=store_env(tmp_path), capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    measured_as = third.split(" (")[0]  # the figures in the reason have moved on since
    assert f"measured as the job runs: {measured_as} ({winner} measured faster" in tuned.stdout
