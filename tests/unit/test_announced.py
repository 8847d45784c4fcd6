"""Announcing ended jobs and batches once their hooks ran, and finding those a dead
server never announced (`store.announced`, `ServiceState.announce_untold`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from thresher.service.config import ServerConfig, prepare
from thresher.service.state import ServiceState
from thresher.spec import JobSpec
from thresher.store import BatchRow, BatchStatus, JobRecord, JobState, Store, open_store

pytestmark = pytest.mark.unit


@pytest.fixture
def spec(job_spec: Callable[..., JobSpec]) -> JobSpec:
    return job_spec(job={"name": "j"})


def batch(store: Store, batch_id: str) -> BatchRow:
    row = BatchRow(
        id=batch_id,
        tenant="acme",
        input_file_id="file-1",
        endpoint="/v1/embeddings",
        completion_window="24h",
        status=BatchStatus.VALIDATING,
        created_at=int(time.time()),
    )
    store.batches.create(row)
    return row


def test_an_ended_service_job_is_untold_until_told(store: Store, spec: JobSpec) -> None:
    store.queue_job("served", spec, tenant="acme")
    store.queue_job("mine", spec)  # a command-line job: `thresher run` tells its own
    store.queue_job("waiting", spec, tenant="acme")
    for job_id in ("served", "mine"):
        store.finish(job_id, JobState.SUCCEEDED, None, None)
    assert store.announced.untold_jobs(grace=0) == ["served"]
    assert store.announced.untold_jobs(grace=3600) == []  # its own server has an hour
    store.announced.job_told("served")
    assert store.announced.untold_jobs(grace=0) == []


def test_an_ended_batch_is_untold_until_told(store: Store) -> None:
    table = store.batches
    for batch_id in ("done", "running"):
        batch(store, batch_id)
    table.move("done", BatchStatus.VALIDATING, BatchStatus.FAILED)
    table.move("running", BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS)
    assert store.announced.untold_batches(grace=0) == ["done"]
    assert store.announced.untold_batches(grace=3600) == []
    store.announced.batch_told("done")
    assert store.announced.untold_batches(grace=0) == []


def test_what_ended_before_the_upgrade_counts_as_told(tmp_path: Path, spec: JobSpec) -> None:
    """Migration 15 marks every job and batch that had already ended as announced: a
    server that starts on an old store must not send their webhooks again."""
    import sqlite3

    path = tmp_path / "store.db"
    store = open_store(f"sqlite:///{path}")
    store.queue_job("old", spec, tenant="acme")
    store.finish("old", JobState.FAILED, None, None)
    batch(store, "old-batch")
    store.batches.move("old-batch", BatchStatus.VALIDATING, BatchStatus.FAILED)
    with sqlite3.connect(path) as db:  # back to how version 14 left them
        db.execute("UPDATE thresher_jobs SET announced_at = NULL")
        db.execute("UPDATE thresher_batches SET announced_at = NULL")
        db.execute("DELETE FROM thresher_schema WHERE version >= 15")  # and those after
        for statement in (
            "DROP INDEX thresher_jobs_announced",
            "DROP INDEX thresher_batches_announced",
            "ALTER TABLE thresher_jobs DROP COLUMN announced_at",
            "ALTER TABLE thresher_batches DROP COLUMN announced_at",
            "ALTER TABLE thresher_schedules DROP COLUMN quarantined",  # migration 16's
            "ALTER TABLE thresher_trigger_defs DROP COLUMN quarantined",
            "ALTER TABLE thresher_ticks DROP COLUMN backfill",  # migration 18's
        ):
            db.execute(statement)
    again = open_store(f"sqlite:///{path}")
    assert again.announced.untold_jobs(0) == [] and again.announced.untold_batches(0) == []


def test_a_servers_state_announces_after_the_hooks_even_one_that_fails(
    tmp_path: Path, spec: JobSpec
) -> None:
    config = prepare(ServerConfig(data_dir=tmp_path / "data"))
    state = ServiceState(open_store(f"sqlite:///{tmp_path / 'store.db'}"), config, tmp_path)
    seen: list[str] = []

    def failing(record: JobRecord) -> None:
        raise RuntimeError("a hook's bug")

    state.on_job_finished += [failing, lambda record: seen.append(record.id)]
    state.on_batch_ended.append(lambda row: seen.append(row.id))
    for job_id in ("a", "b"):
        state.store.queue_job(job_id, spec, tenant="acme")
        state.store.finish(job_id, JobState.SUCCEEDED, None, None)
    batch(state.store, "batch-1")
    state.store.batches.move("batch-1", BatchStatus.VALIDATING, BatchStatus.CANCELLED)

    state.job_finished(state.store.job("a"))  # as the scheduler does when a job ends
    assert seen == ["a"] and state.store.announced.untold_jobs(0) == ["b"]
    assert state.announce_untold(grace=0) == 2  # b and the batch: their server died
    assert seen == ["a", "b", "batch-1"]
    assert state.announce_untold(grace=0) == 0
