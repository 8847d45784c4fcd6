"""Threads or processes by measurement (plan/history.py): a model's earlier jobs in the
store decide, the way not measured is tried once, and only where the run leaves it open."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from thresher.plan import measurable, plan_placement
from thresher.plan.history import PastRun, choose, past_runs
from thresher.plan.placement import Measured
from thresher.spec import JobSpec, RunSection
from thresher.store import JobState, Store

pytestmark = pytest.mark.unit

CORES = os.cpu_count() or 1
several_cores = pytest.mark.skipif(CORES < 2, reason="threads or processes needs two cores")


def test_nothing_measured_leaves_the_planners_rule() -> None:
    assert choose([], 1000) is None


def test_the_way_not_measured_is_tried_once() -> None:
    only_processes = choose([PastRun(False, 1000, 2.0)], 1000)
    assert only_processes is not None and only_processes.threads
    assert "only processes measured" in only_processes.reason
    only_threads = choose([PastRun(True, 1000, 2.0)], 1000)
    assert only_threads is not None and not only_threads.threads


def test_the_faster_way_at_about_the_jobs_size_wins() -> None:
    past = [
        PastRun(True, 1_000, 0.4),  # threads: no worker to start
        PastRun(False, 1_000, 0.8),
        PastRun(True, 5_000_000, 4.0),
        PastRun(False, 5_000_000, 3.0),  # processes: faster once there is work
    ]
    small, big = choose(past, 2_000), choose(past, 4_000_000)
    assert small is not None and small.threads
    assert big is not None and not big.threads
    # Scaled to the job's rows: 3.0 s for 5M rows is 2.4 s for 4M.
    assert big.reason.endswith("threads 3.20 s, processes 2.40 s for 4,000,000 rows")
    unknown = choose(past, None)  # an input of unknown size: the biggest runs measured
    assert unknown is not None and not unknown.threads


def test_one_slow_run_does_not_turn_the_choice() -> None:
    past = [PastRun(True, 1000, 9.0), PastRun(True, 1000, 1.0), PastRun(False, 1000, 2.0)]
    chosen = choose(past, 1000)
    assert chosen is not None and chosen.threads


def manifest(job: JobSpec, threads: bool, rows: int, seconds: float, **over: Any) -> dict:
    from thresher.models import model_fingerprint

    return {
        "model": {"kind": job.model.kind, **model_fingerprint(job.model)},
        "spec": {"run": {"executor": "local"}},
        "device": "cpu",
        "workers": 1 if threads else CORES,
        "threads_per_worker": CORES if threads else 1,
        "worker_in_process": threads,
        "seconds": seconds,
        "rows_per_second": rows / seconds,
        **over,
    }


def test_only_this_models_local_cpu_jobs_on_this_many_cores_count(
    store: Store, tmp_path: Path
) -> None:
    (tmp_path / "m.onnx").write_bytes(b"weights")
    (tmp_path / "other.onnx").write_bytes(b"other weights")
    spec = JobSpec.model_validate(
        {
            "source": {"uri": str(tmp_path / "in.parquet")},
            "model": {"kind": "onnx", "uri": str(tmp_path / "m.onnx")},
            "sink": {"uri": str(tmp_path / "out/")},
        }
    )
    other = spec.model_copy(
        update={"model": spec.model.model_copy(update={"uri": str(tmp_path / "other.onnx")})}
    )
    kept = manifest(spec, True, 1000, 0.5)
    bodies = [
        kept,
        manifest(other, False, 1000, 0.5),  # another model
        manifest(spec, False, 1000, 0.5, device="cuda"),
        manifest(spec, False, 1000, 0.5, spec={"run": {"executor": "ray"}}),
        manifest(spec, False, 1000, 0.5, workers=CORES + 1),  # another machine
    ]
    for number, body in enumerate(bodies):
        finish(store, spec, f"job-{number}", JobState.SUCCEEDED, body)
    finish(store, spec, "failed", JobState.FAILED, manifest(spec, False, 1000, 0.1))
    assert past_runs(store, spec) == [PastRun(True, 1000, 0.5)]
    # Only the store's latest jobs are searched: seven made since, of other models.
    assert len(store.manifests_of(spec.model.uri, 20, among=7)) == 4  # of m.onnx
    for number in range(7):
        finish(store, other, f"later-{number}", JobState.SUCCEEDED, bodies[1])
    assert store.manifests_of(spec.model.uri, 20, among=7) == []
    (tmp_path / "m.onnx").write_bytes(b"retrained")  # same path, other weights
    assert past_runs(store, spec) == []


def finish(store: Store, spec: JobSpec, job_id: str, state: JobState, body: dict) -> None:
    store.create_job(job_id, "job", spec, {"shards": []})
    store.finish(job_id, state, body, None if state == JobState.SUCCEEDED else "it failed")
    time.sleep(0.002)  # created_at tells them apart


@several_cores
def test_a_measured_choice_places_threads_only_where_the_run_leaves_it_open() -> None:
    threads = Measured(True, "threads measured faster")
    placed = plan_placement(RunSection(), 8, threads)
    assert placed.inline and (placed.workers, placed.threads) == (1, CORES)
    assert placed.describe().endswith("(threads measured faster)")
    processes = plan_placement(RunSection(), 8, Measured(False, "processes measured faster"))
    assert processes.forked and processes.workers == CORES
    for run, shards in [
        (RunSection(workers=2), 8),  # the user's word
        (RunSection(executor="ray"), 8),
        (RunSection(device="cpu"), 8),
        (RunSection(), 1),  # one shard runs inline anyway
    ]:
        assert not measurable(run, shards)
        assert plan_placement(run, shards, threads) == plan_placement(run, shards)
