"""Tenant limits and capacity in the server config, and the 429s a tenant over a limit
gets at submission (the whole HTTP app in this process, no background threads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_service_http import make_api, metric

from thresher.service.config import CapacitySettings, ConfigError, TenantLimits, load_config
from thresher.store import JobState, SlotRequest, Slots, retry_lease


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


def test_the_docs_capacity_example_is_a_valid_config(tmp_path: Path) -> None:
    page = (Path(__file__).parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    section = page.split("## Capacity, quotas and preemption", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    config_file = tmp_path / "server.toml"
    config_file.write_text(example)
    config = load_config(config_file)
    assert config.capacity.cpu == 16 and config.limits("acme").worker_slots == 8


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


def test_listings_and_metrics_show_why_jobs_wait_and_the_slots(tmp_path: Path) -> None:
    api = make_api(tmp_path, capacity=CapacitySettings(cpu=3, gpu=0), metrics_public=True)
    store = api.state.store
    running = api.job_on_upload(priority=1)["id"]
    waiting = api.job_on_upload(priority=1)["id"]
    preempted = api.job_on_upload()["id"]
    assert store.leases.acquire(SlotRequest(running, "acme", 1, want=2), Slots(3, 0)).granted
    assert store.queue.take(running)
    store.queue.note_wait(waiting, "waiting for worker slots: 2 of 3 in use")
    assert store.queue.take(preempted) and store.queue.preempt(preempted, "preempted by a job")
    jobs = {j["id"]: j for j in api.client.get("/v1/jobs", headers=api.auth()).json()["data"]}
    assert jobs[waiting]["waiting_for"] == "waiting for worker slots: 2 of 3 in use"
    assert (jobs[preempted]["status"], jobs[preempted]["waiting_for"]) == (
        "preempted",
        "preempted by a job",
    )
    assert jobs[running]["status"] == "running" and jobs[running]["waiting_for"] is None
    assert jobs[running]["slots"] == {"cpu": 2, "gpu": 0} and jobs[waiting]["slots"] is None
    text = api.client.get("/metrics").text
    assert metric(text, "thresher_jobs", state="preempted") == 1
    assert metric(text, "thresher_queue_length", priority="1") == 1
    assert metric(text, "thresher_queue_length", priority="0") == 1
    assert "thresher_cpu_slots_used 2" in text and "thresher_cpu_slots_free 1" in text
    ended: list[str] = []
    api.state.on_job_finished.append(lambda record: ended.append(record.state.value))
    cancelled = api.client.post(f"/v1/jobs/{preempted}/cancel", headers=api.auth()).json()
    assert cancelled["status"] == "cancelled" and ended == ["cancelled"]


def test_a_retry_round_s_lease_answers_for_its_job(tmp_path: Path) -> None:
    """While a round of a failed job holds its lease (starting, or its process ending):
    another round is 429 with a short Retry-After, a resume is 409 (it would run the
    job twice at once), and the job shows the round's slots; once it is given back, the
    resume is taken."""
    api = make_api(tmp_path, capacity=CapacitySettings(cpu=2, gpu=0))
    store, job = api.state.store, api.job_on_upload()["id"]
    assert store.queue.take(job)
    store.finish(job, JobState.FAILED, {}, "too many bad rows")
    lease = retry_lease(job)
    assert store.leases.acquire(SlotRequest(lease, "acme", 0, want=1), Slots(2, 0)).granted
    again = api.client.post(f"/v1/jobs/{job}/retry-errors", headers=api.auth())
    assert again.status_code == 429, again.text
    assert "is starting or ending" in again.json()["detail"]
    assert again.headers["Retry-After"] == "1"
    resumed = api.client.post(f"/v1/jobs/{job}/resume", headers=api.auth())
    assert resumed.status_code == 409 and "(or retry round)" in resumed.json()["detail"]
    shown = api.client.get(f"/v1/jobs/{job}", headers=api.auth()).json()
    assert (shown["status"], shown["slots"]) == ("failed", {"cpu": 1, "gpu": 0})
    store.leases.release(lease)
    assert api.client.get(f"/v1/jobs/{job}", headers=api.auth()).json()["slots"] is None
    assert api.client.post(f"/v1/jobs/{job}/resume", headers=api.auth()).status_code == 200
