"""Tenant limits and capacity in the server config, and the 429s a tenant over a limit
gets at submission (the whole HTTP app in this process, no background threads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_service_http import make_api

from thresher.service.config import CapacitySettings, ConfigError, TenantLimits, load_config
from thresher.store import JobState


def test_capacity_and_tenant_limits_come_from_the_config(tmp_path: Path) -> None:
    config_file = tmp_path / "server.toml"
    config_file.write_text(
        "min_run_seconds = 5\n[capacity]\ncpu = 6\n"
        "[tenants.acme]\nmax_priority = 3\nconcurrent_jobs = 1\nrows_per_day = 100\n"
    )
    config = load_config(config_file)
    assert (config.capacity.cpu, config.capacity.min_workers, config.min_run_seconds) == (6, 1, 5)
    assert config.limits("acme").max_priority == 3 and config.limits("acme").queued_jobs is None
    assert config.limits("globex") == TenantLimits()  # unlisted: no limits
    assert CapacitySettings().cpu == (os.cpu_count() or 1)


def test_a_misspelt_limit_is_named(tmp_path: Path) -> None:
    config_file = tmp_path / "server.toml"
    config_file.write_text("[tenants.acme]\nmax_prio = 3\nqueued_jobs = -1\n[capacity]\ncpu = 0\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config_file)
    text = str(caught.value)
    assert "tenants.acme.max_prio: unknown key" in text
    assert "tenants.acme.queued_jobs" in text and "capacity.cpu" in text


def test_a_priority_over_the_tenants_limit_is_429_without_retry_after(tmp_path: Path) -> None:
    api = make_api(tmp_path, tenants={"acme": TenantLimits(max_priority=3)})
    file_id = api.upload()["id"]
    refused = api.submit({"input_file_id": file_id, "model": "double", "priority": 4})
    assert refused.status_code == 429, refused.text
    assert "max_priority = 3" in refused.json()["detail"] and "Retry-After" not in refused.headers
    assert api.submit({"input_file_id": file_id, "model": "double", "priority": 3}).is_success
    other = api.upload(tenant="globex")["id"]
    body = {"input_file_id": other, "model": "double", "priority": 9}
    assert api.submit(body, tenant="globex").status_code == 201  # its own limits: none


def test_too_many_queued_jobs_is_429_with_retry_after(tmp_path: Path) -> None:
    api = make_api(tmp_path, tenants={"acme": TenantLimits(queued_jobs=2)})
    api.job_on_upload()
    api.job_on_upload()
    file_id = api.upload()["id"]
    refused = api.submit({"input_file_id": file_id, "model": "double"})
    assert refused.status_code == 429, refused.text
    assert "2 jobs queued, its limit queued_jobs = 2" in refused.json()["detail"]
    assert refused.headers["Retry-After"] == "30"
    assert api.job_on_upload(tenant="globex")["status"] == "queued"


def test_workers_past_the_tenants_slots_is_429_and_past_the_machine_422(tmp_path: Path) -> None:
    api = make_api(
        tmp_path,
        capacity=CapacitySettings(cpu=4, gpu=0),
        tenants={"acme": TenantLimits(worker_slots=2)},
    )
    file_id = api.upload()["id"]
    refused = api.submit({"input_file_id": file_id, "model": "double", "workers": 3})
    assert refused.status_code == 429 and "worker_slots = 2" in refused.json()["detail"]
    theirs = api.upload(tenant="globex")["id"]
    too_many = api.submit({"input_file_id": theirs, "model": "double", "workers": 5}, "globex")
    assert too_many.status_code == 422 and "capacity.cpu" in too_many.text
    queued = api.submit({"input_file_id": file_id, "model": "double", "workers": 2})
    assert queued.status_code == 201
    assert api.state.store.job(queued.json()["id"]).spec.run.workers == 2


def test_rows_read_in_a_day_past_the_limit_is_429_with_retry_after(tmp_path: Path) -> None:
    api = make_api(tmp_path, tenants={"acme": TenantLimits(rows_per_day=10)})
    store = api.state.store
    done = api.job_on_upload()["id"]
    assert store.queue.take(done)
    store.set_plan(done, {"shards": [{}, {}], "schema": ""})
    for index, rows in enumerate((6, 5)):
        store.attempt_started(done, index, f"a{index}", 1)
        store.shard_done(done, index, f"a{index}", (rows, rows, 0), 0.1)
    store.finish(done, JobState.SUCCEEDED, None, None)
    file_id = api.upload()["id"]
    refused = api.submit({"input_file_id": file_id, "model": "double"})
    assert refused.status_code == 429, refused.text
    assert "read 11 rows in the last 24 hours, its limit rows_per_day = 10" in refused.text
    assert 86_000 < int(refused.headers["Retry-After"]) <= 86_401  # when that job leaves
