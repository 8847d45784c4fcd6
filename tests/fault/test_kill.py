"""kill -9, for real: the coordinator or a worker dies, `thresher resume` finishes the job,
and the output holds exactly the rows of an uninterrupted run — none lost, none twice, no
stray files.

Targeted kills use named crash points (THRESHER_FAULT: the process SIGKILLs itself at that
exact step); random kills send SIGKILL from outside at seeded random moments.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from harness import FIGURES, FaultJob, make_job, wait_for_children, wait_for_workers

KILLED = -signal.SIGKILL
SEED = 20261130
# Twelve seeded kills: each lands at a different step of a run; the named crash points
# above cover every step deterministically, and CI has 30 minutes for the whole suite.
RANDOM_KILLS = 12


def finish(job: FaultJob, tries: int = 3) -> int:
    """Resume the latest job until it succeeds; returns how many resumes it took. A
    coordinator killed before it recorded the job left nothing to resume (and, the job
    unrecorded, nothing committed): the job is run again, as a user would."""
    job_id = job.recorded_job()
    if job_id is None:
        again = job.run()
        assert again.returncode == 0, f"rerun after an early kill failed:\n{again.stderr[-2000:]}"
        return 0
    for attempt in range(1, tries + 1):
        result = job.resume(job_id)
        if result.returncode == 0:
            return attempt
    raise AssertionError(f"resume did not finish job {job_id}:\n{result.stderr[-2000:]}")


def check_exact(job: FaultJob, golden: tuple[Counter[int], Counter[int]], label: str) -> None:
    ids, errors = job.ids(), job.error_ids()
    want_ids, want_errors = golden
    lost = sum(((want_ids + want_errors) - (ids + errors)).values())
    duplicated = sum(n - 1 for n in (ids + errors).values() if n > 1)
    strays = job.stray_files()
    FIGURES.append(
        f"{label:<34} rows={sum(ids.values()) + sum(errors.values()):>6} "
        f"lost={lost} duplicated={duplicated} stray_files={len(strays)}"
    )
    assert lost == 0 and duplicated == 0, f"{label}: lost {lost}, duplicated {duplicated}"
    assert ids == want_ids and errors == want_errors
    assert strays == [], strays
    assert job.has_success()


@pytest.mark.parametrize("sink", ["parquet", "sqlite", "duckdb", "delta", "iceberg"])
@pytest.mark.parametrize("point", ["before_commit", "mid_commit", "after_commit"])
def test_coordinator_killed_at_commit_step(
    tmp_path: Path, golden: tuple[Counter[int], Counter[int]], point: str, sink: str
) -> None:
    job = make_job(tmp_path, sink)
    first = job.run(fault=f"{point}:3")
    assert first.returncode == KILLED, first.stderr[-2000:]
    assert not job.has_success()
    finish(job)
    check_exact(job, golden, f"coordinator@{point} ({sink})")


def test_killed_between_a_table_commit_and_its_bookkeeping(
    tmp_path: Path, golden: tuple[Counter[int], Counter[int]]
) -> None:
    """The job's Iceberg snapshot landed, then the coordinator died before it removed the
    parts and finished the publish: resume finds the snapshot by the commit name in its
    summary and commits nothing twice. Append mode, so a second commit would show as
    every row twice."""
    job = make_job(tmp_path, "iceberg")
    job.spec.write_text(job.spec.read_text() + 'mode = "append"\n')  # [sink] comes last
    assert job.run(fault="after_table_commit").returncode == KILLED
    assert not job.has_success()
    table = job.iceberg_table()
    assert table is not None and len(table.snapshots()) == 1
    finish(job)
    check_exact(job, golden, "coordinator@after_table_commit (iceberg)")
    table = job.iceberg_table()
    assert table is not None and len(table.snapshots()) == 1


def test_worker_killed_after_staging(
    tmp_path: Path, golden: tuple[Counter[int], Counter[int]]
) -> None:
    """A worker dies with its part staged but unreported: fresh workers retry the shard up
    to run.max_attempts, the other shards commit, the job reports the shard as failed."""
    job = make_job(tmp_path, "parquet")
    # The fault variable reaches every worker, so shard 5 dies on each of its attempts
    # while the other shards finish; resume (without the fault) then completes it.
    result = job.run(fault="worker_after_stage:5")
    assert result.returncode == 1  # all 3 attempts of shard 5 died
    assert "shard 5" in result.stderr + result.stdout
    finish(job)
    check_exact(job, golden, "worker@after_stage (x3, resume)")


def test_killed_during_resume(tmp_path: Path, golden: tuple[Counter[int], Counter[int]]) -> None:
    job = make_job(tmp_path, "parquet")
    assert job.run(fault="after_commit:4").returncode == KILLED
    job_id = job.latest_job()
    assert job.resume(job_id, fault="resume_start").returncode == KILLED
    assert job.resume(job_id, fault="before_commit:8").returncode == KILLED
    finish(job)
    check_exact(job, golden, "coordinator@resume x2")


@pytest.mark.parametrize("n", range(RANDOM_KILLS))
def test_random_kills(tmp_path: Path, n: int, golden: tuple[Counter[int], Counter[int]]) -> None:
    """SIGKILL the coordinator, a worker or the zygote the workers are forked from at a
    seeded random moment, then resume (one test per kill, so they spread over the test
    processes)."""
    rng = random.Random(SEED + n)
    target = rng.choice(["coordinator", "worker", "zygote"])
    delay = rng.uniform(0.2, 4.0)
    sink = "sqlite" if n % 4 == 3 else "parquet"
    job = make_job(tmp_path, sink, pace=0.02)
    label = f"random #{n:02d} {target}@{delay:.2f}s ({sink})"
    _kill_after(job, target, delay)
    if not job.has_success():
        finish(job)
    check_exact(job, golden, label)


def _kill_after(job: FaultJob, target: str, delay: float) -> None:
    proc = job.start()
    try:
        found = {"worker": wait_for_workers, "zygote": wait_for_children}.get(target)
        workers = found(proc.pid) if found else []
        time.sleep(delay)
        if target == "coordinator":
            proc.send_signal(signal.SIGKILL)
        elif workers:
            for pid in workers[:1]:
                _kill(pid)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout and proc.stdout.close()
        proc.stderr and proc.stderr.close()


def _kill(pid: int) -> None:
    # ProcessLookupError: it had already finished its work; the kill landed after the end.
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_resume_of_finished_job_is_refused(tmp_path: Path) -> None:
    job = make_job(tmp_path, "parquet")
    assert job.run().returncode == 0
    again = job.resume(job.latest_job())
    assert again.returncode == 1
    assert "already succeeded" in again.stderr


def test_status_and_cancel(tmp_path: Path) -> None:
    job = make_job(tmp_path, "parquet", pace=0.02)
    proc = job.start()
    try:
        wait_for_children(proc.pid)
        job_id = job.latest_job()
        cancel = subprocess.run(
            [*job.cli(), "cancel", job_id],
            env=job.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert cancel.returncode == 0 and "cancelled" in cancel.stdout
        assert proc.wait(timeout=60) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    status = subprocess.run(
        [*job.cli(), "status", job_id], env=job.env(), capture_output=True, text=True, check=False
    )
    assert "cancelled" in status.stdout
    assert not job.has_success()
    finish(job)
    assert job.has_success()


@pytest.mark.parametrize(
    ("sink", "point"),
    [
        ("parquet", "retry_after_output"),
        ("parquet", "retry_after_errors"),
        ("iceberg", "after_table_commit"),  # its fixed rows' snapshot landed, part kept
    ],
)
def test_retry_errors_killed_mid_shard(tmp_path: Path, sink: str, point: str) -> None:
    """retry-errors after the model was fixed, killed between its commit steps and run
    again: every row is in the output or the error file exactly once."""
    job = make_job(tmp_path, sink)
    assert job.run().returncode == 0
    rejected = job.error_ids()
    assert rejected
    fixed_model = (tmp_path / "model.py").read_text().replace("> 3.2", "> 3.6")
    (tmp_path / "model.py").write_text(fixed_model)
    job_id = job.latest_job()
    retry = [*job.cli(), "retry-errors", job_id]
    killed = subprocess.run(
        retry, env=job.env(f"{point}"), capture_output=True, text=True, check=False
    )
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    again = subprocess.run(retry, env=job.env(), capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    ids, errors = job.ids(), job.error_ids()
    both = ids + errors
    fixed = len(rejected) - len(errors)
    FIGURES.append(
        f"retry-errors@{point:<20} rows={sum(both.values()):>6} fixed={fixed} "
        f"duplicated={sum(n - 1 for n in both.values() if n > 1)} "
        f"lost={24_000 - len(both)} stray_files={len(job.stray_files())}"
    )
    assert sorted(both) == list(range(24_000)) and max(both.values()) == 1
    assert 0 < len(errors) < len(rejected)
    assert job.stray_files() == []
