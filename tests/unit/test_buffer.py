"""The request buffer: records in over HTTP, batch jobs out, answers mapped back per
custom_id, exactly once through re-run hooks and interrupted flushes.

Jobs run for real (`run_job`, one worker process, a tiny python model) but synchronously
inside `submit_job`, so every step is deterministic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from thresher.coordinator.job import new_job_id, run_job
from thresher.service.background.buffer import Flusher, router, start_flusher
from thresher.service.config import BufferSettings, ServerConfig, prepare
from thresher.service.errors import ServiceError, TooManyRequests, Unprocessable
from thresher.service.policies.auth import create_token
from thresher.service.state import ServiceState
from thresher.spec import JobSpec, ModelSection
from thresher.store import JobState, open_store

MODEL = """
class Doubler:
    def predict(self, batch):
        if (batch["x"] < 0).any():
            raise ValueError("negative x")
        return {"prediction": batch["x"] * 2}
"""


@dataclass
class SyncJobs:
    """`submit_job` that queues the job like the service and, with `run_now`, runs it to
    its end on the spot and calls the finished hooks, as the scheduler would."""

    state: ServiceState
    run_now: bool = True
    calls: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)

    def submit_job(
        self, tenant: str, body: dict[str, Any], idempotency_key: str | None = None
    ) -> str:
        self.calls.append((tenant, body, idempotency_key))
        job_id = new_job_id()
        spec = JobSpec.model_validate(
            {
                "source": {"uri": body["source"]["uri"], "id_column": body["id_column"]},
                "model": self.state.config.models[body["model"]].model_dump(mode="json"),
                "run": {"workers": 1},
                "sink": {"uri": f"{self.state.output_dir(job_id)}/", "format": "jsonl"},
            }
        )
        store = self.state.store
        queued = store.queue_job(job_id, spec, tenant, idempotency_key)
        if queued == job_id and self.run_now:
            self.run_queued()
        return queued

    def run_queued(self) -> None:
        store = self.state.store
        while (record := store.claim_next_queued()) is not None:
            run_job(record.spec, store, queued_id=record.id)
            self.state.job_finished(store.job(record.id))


@dataclass
class Service:
    state: ServiceState
    jobs: SyncJobs
    flusher: Flusher
    client: TestClient
    tokens: dict[str, str]

    def post(self, body: Any, tenant: str = "acme") -> Any:
        return self.client.post("/v1/requests", json=body, headers=self.auth(tenant))

    def get(self, custom_id: str, tenant: str = "acme") -> Any:
        return self.client.get(f"/v1/requests/{custom_id}", headers=self.auth(tenant))

    def auth(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[tenant]}"}

    def batch_files(self) -> list[Path]:
        return sorted((self.state.data_dir / "buffer").glob("*.jsonl"))


def make_service(tmp_path: Path, max_records: int = 4, max_wait: float = 60.0) -> Service:
    (tmp_path / "doubler.py").write_text(MODEL)
    model = ModelSection(
        kind="python", uri=f"{tmp_path / 'doubler.py'}:Doubler", batch_format="numpy"
    )
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            models={"double": model},
            buffer={"double": BufferSettings(max_records=max_records, max_wait=max_wait)},
        )
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    state = ServiceState(store=store, config=config, data_dir=config.data_dir)
    jobs = SyncJobs(state)
    flusher = Flusher(state, jobs.submit_job)
    state.on_job_finished.append(flusher.job_finished)
    app = FastAPI()
    app.state.service = state
    app.include_router(router)

    @app.exception_handler(ServiceError)
    def refused(request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status)

    tokens = {tenant: create_token(store, tenant) for tenant in ("acme", "globex")}
    return Service(state, jobs, flusher, TestClient(app), tokens)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    made = make_service(tmp_path)
    with made.client:
        yield made


def records(xs: dict[str, float], model: str | None = "double") -> list[dict[str, Any]]:
    return [{"custom_id": cid, "model": model, "input": {"x": x}} for cid, x in xs.items()]


def test_a_posted_record_waits_until_its_batch(service: Service) -> None:
    answer = service.post({"custom_id": "r1", "model": "double", "input": {"x": 1.5}})
    assert answer.status_code == 202
    assert answer.json()["data"][0] | {"created_at": None} == {
        "custom_id": "r1", "model": "double", "status": "waiting", "created_at": None,
    }  # fmt: skip
    got = service.get("r1").json()
    assert got["status"] == "waiting" and "output" not in got and "job_id" not in got
    assert service.flusher.flush_due() == 0 and service.jobs.calls == []


def test_a_full_buffer_becomes_a_job_and_every_custom_id_gets_its_answer(
    service: Service,
) -> None:
    xs = {
        "a": 1.0,
        "b": 2.0,
        "7": 3.5,
        "b-neg": -1.0,
        "c": 4.0,
        "d": 5.0,
        "e": 6.0,
        "f": 7.0,
        "g": 8.0,
    }
    assert service.post({"model": "double", "requests": records(xs, None)}).status_code == 202
    assert service.flusher.flush_due() == 2  # 9 waiting, 4 a batch: two full batches
    assert len(service.jobs.calls) == 2
    # Batch files are named by random batch ids: tell them apart by what they hold.
    batches = sorted(
        ([json.loads(line) for line in f.read_text().splitlines()] for f in service.batch_files()),
        key=lambda lines: str(lines[0]["custom_id"]),
    )
    assert batches[0] == [{"custom_id": c, "x": xs[c]} for c in ("7", "a", "b", "b-neg")]
    assert batches[1] == [{"custom_id": c, "x": xs[c]} for c in ("c", "d", "e", "f")]
    tenant, body, key = service.jobs.calls[0]
    assert tenant == "acme" and body["id_column"] == "custom_id" and key
    assert body["output_format"] == "jsonl" and body["source"]["uri"].endswith(".jsonl")
    for cid in ("a", "b", "7", "c", "d", "e", "f"):
        got = service.get(cid).json()
        assert got["status"] == "done" and got["output"] == {"prediction": 2 * xs[cid]}, got
    failed = service.get("b-neg").json()
    assert failed["status"] == "failed" and failed["job_id"]
    assert failed["error"] == {"stage": "predict", "error": "ValueError", "message": "negative x"}
    assert service.get("g").json()["status"] == "waiting"  # the ninth waits for company


def test_the_oldest_record_waiting_max_wait_starts_a_batch(tmp_path: Path) -> None:
    made = make_service(tmp_path, max_records=1000, max_wait=0.2)
    made.state.on_job_finished.clear()  # start_flusher registers its own hook
    stop = start_flusher(made.state, poll=0.02, submit=made.jobs.submit_job)
    try:
        with made.client:
            made.post(records({"x1": 1.0, "x2": 2.0}))
            deadline = time.monotonic() + 30
            while made.get("x2").json()["status"] != "done" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert made.get("x1").json()["output"] == {"prediction": 2.0}
            assert made.get("x2").json()["output"] == {"prediction": 4.0}
    finally:
        stop()
    assert len(made.jobs.calls) == 1 and made.state.on_job_finished == []


def test_a_custom_id_is_buffered_once_per_tenant(service: Service) -> None:
    assert service.post(records({"dup": 1.0})).status_code == 202
    again = service.post(records({"new": 2.0, "dup": 3.0}))
    assert again.status_code == 409 and "'dup'" in again.json()["detail"]
    assert service.get("new").status_code == 404  # nothing of a refused request is kept
    twice = service.post(records({"twin": 1.0}) * 2)
    assert twice.status_code == 409 and service.get("twin").status_code == 404
    assert service.post(records({"dup": 5.0}), tenant="globex").status_code == 202


def test_another_tenants_custom_id_is_not_found(service: Service) -> None:
    service.post(records({"secret-order": 1.0}))
    answer = service.get("secret-order", tenant="globex")
    assert answer.status_code == 404 and "secret-order" in answer.json()["detail"]
    assert service.client.get("/v1/requests/secret-order").status_code == 401


def test_bad_records_are_refused_naming_each_problem(service: Service) -> None:
    answer = service.post(
        [
            {"custom_id": "a", "model": "nope", "input": {"x": 1}},
            {"custom_id": "b", "input": {"x": 1}},
            {"custom_id": "c", "model": "double", "input": {"custom_id": "x"}},
        ]
    )
    assert answer.status_code == 422
    detail = answer.json()["detail"]
    assert detail[0].startswith("requests[0].model: no model named 'nope'")
    assert detail[1].startswith("requests[1].model: required")
    assert detail[2].startswith("requests[2].input.custom_id")
    assert service.post({"custom_id": "", "model": "double", "input": {}}).status_code == 422


def test_running_the_finished_hook_again_changes_nothing(service: Service) -> None:
    service.post(records({"a": 1.0, "b": 2.0, "c": 3.0, "d": -4.0}))
    service.flusher.flush_due()
    before = {cid: service.get(cid).json() for cid in "abcd"}
    job = service.state.store.job(before["a"]["job_id"])
    service.state.job_finished(job)
    service.flusher.job_finished(job)
    service.flusher.reconcile()
    assert {cid: service.get(cid).json() for cid in "abcd"} == before
    assert len(service.jobs.calls) == 1


def test_a_flush_interrupted_before_submitting_is_finished_on_restart(service: Service) -> None:
    service.post(records({"a": 1.0, "b": 2.0}))
    assert service.flusher.table.claim_batch("acme", "double", "batch-crashed", 10) == 2
    # The server dies here: rows batched, no file, no job. A new server reconciles.
    Flusher(service.state, service.jobs.submit_job).reconcile()
    assert [p.name for p in service.batch_files()] == ["batch-crashed.jsonl"]
    assert service.get("a").json()["output"] == {"prediction": 2.0}
    assert service.get("b").json()["status"] == "done" and len(service.jobs.calls) == 1


def test_a_flush_interrupted_after_submitting_links_the_same_job(service: Service) -> None:
    service.post(records({"a": 1.0, "b": 2.0}))
    service.jobs.run_now = False  # the job is queued, and the server dies before linking it
    flusher = service.flusher
    flusher.table.claim_batch("acme", "double", "batch-late", 10)
    flusher.submit_batch("batch-late", "acme", "double")
    service.state.store.db.query("UPDATE thresher_requests SET job_id = NULL")
    # resubmits with the same idempotency key
    Flusher(service.state, service.jobs.submit_job).reconcile()
    first, second = (call[2] for call in service.jobs.calls)
    assert first == second == "thresher-buffer:batch-late"
    assert service.get("a").json()["status"] == "batched"
    service.jobs.run_queued()
    jobs = service.state.store.db.query("SELECT id FROM thresher_jobs")
    assert len(jobs) == 1 and service.get("a").json()["job_id"] == jobs[0][0]
    assert service.get("b").json()["output"] == {"prediction": 4.0}


def test_a_job_that_ended_while_the_server_was_down_is_settled(service: Service) -> None:
    service.post(records({"a": 1.0, "b": -2.0}))
    service.jobs.run_now = False
    service.flusher.table.claim_batch("acme", "double", "batch-orphan", 10)
    service.flusher.submit_batch("batch-orphan", "acme", "double")
    service.state.on_job_finished.clear()  # the job ends, but no hook runs
    service.jobs.run_queued()
    assert service.get("a").json()["status"] == "batched"
    Flusher(service.state, service.jobs.submit_job).reconcile()
    assert service.get("a").json()["status"] == "done"
    assert service.get("b").json()["error"]["stage"] == "predict"


def test_a_batch_the_service_refuses_fails_its_records(service: Service) -> None:
    def refuse(tenant: str, body: dict[str, Any], idempotency_key: str | None = None) -> str:
        raise Unprocessable(["model: no model named 'double'"])

    service.flusher.submit = refuse
    service.post(records({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}))
    service.flusher.flush_due()
    got = service.get("c").json()
    assert got["status"] == "failed" and got["error"]["stage"] == "submit"
    assert service.flusher.table.unlinked_batches() == []


def test_a_batch_over_a_limit_that_waiting_lifts_is_submitted_again(service: Service) -> None:
    real = service.flusher.submit
    refusals = iter([TooManyRequests("tenant acme has 2 jobs queued", retry_after=30)])

    def over_then_under(tenant: str, body: dict[str, Any], key: str | None = None) -> str:
        if (refusal := next(refusals, None)) is not None:
            raise refusal
        return real(tenant, body, key)

    service.flusher.submit = over_then_under
    service.post(records({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}))
    service.flusher.flush_due()
    assert service.get("a").json()["status"] == "batched"  # waits, not failed
    assert len(service.flusher.table.unlinked_batches()) == 1
    service.flusher.reconcile()
    assert service.get("a").json()["output"] == {"prediction": 2.0}


def test_records_of_a_cancelled_job_fail_with_the_jobs_reason(service: Service) -> None:
    service.post(records({"a": 1.0, "b": 2.0}))
    service.jobs.run_now = False
    service.flusher.table.claim_batch("acme", "double", "batch-stopped", 10)
    service.flusher.submit_batch("batch-stopped", "acme", "double")
    job_id = service.get("a").json()["job_id"]
    assert service.state.store.request_cancel(job_id) == JobState.CANCELLED
    service.state.job_finished(service.state.store.job(job_id))
    got = service.get("b").json()
    assert got["status"] == "failed"
    assert got["error"] == {
        "stage": "job",
        "error": "job cancelled",
        "message": "cancelled by request",
    }


def test_only_the_job_the_buffer_submitted_answers_a_batch(service: Service) -> None:
    service.post(records({"a": 1.0}))
    service.jobs.run_now = False
    service.flusher.table.claim_batch("acme", "double", "batch-mine", 10)
    service.flusher.submit_batch("batch-mine", "acme", "double")
    _, body, _ = service.jobs.calls[0]
    other = service.jobs.submit_job("acme", body)  # the tenant's own job over the file
    service.state.store.request_cancel(other)
    service.state.job_finished(service.state.store.job(other))
    assert service.get("a").json()["status"] == "batched"


def test_a_record_that_fails_decoding_keeps_its_reason(service: Service) -> None:
    """A record the reader rejects has no id it could read: its answer is found by its
    line in the batch file, and says why (it once said only that the job left it out)."""
    xs: dict[str, Any] = {"a": 1.0, "b": "not a number", "c": 3.0, "d": 4.0}
    assert service.post({"model": "double", "requests": records(xs, None)}).status_code == 202
    assert service.flusher.flush_due() == 1
    failed = service.get("b").json()
    assert failed["status"] == "failed", failed
    assert failed["error"]["stage"] == "decode", failed
    assert "x" in failed["error"]["message"], failed
    assert [service.get(c).json()["output"] for c in "acd"] == [
        {"prediction": 2.0}, {"prediction": 6.0}, {"prediction": 8.0},
    ]  # fmt: skip


def test_one_record_over_a_mebibyte_is_answered_alone(service: Service) -> None:
    """A batch file's first record over 1 MiB once failed the reader, and so every record
    of its batch; now it is read like any other (the limit is 64 MiB a line)."""
    xs = {"big": 1.0, "a": 1.0, "b": 2.0, "c": 3.0}
    notes = {"big": "n" * (2 << 20)}  # every record has the same columns, one is huge
    requests = [
        {"custom_id": c, "input": {"x": x, "note": notes.get(c, "short")}} for c, x in xs.items()
    ]
    body = {"model": "double", "requests": requests}
    assert service.post(body).status_code == 202
    assert service.flusher.flush_due() == 1
    for custom_id, x in xs.items():
        got = service.get(custom_id).json()
        assert got["status"] == "done", (got.get("error"), custom_id)
        assert got["output"]["prediction"] == 2 * x


def test_a_record_in_both_parts_is_answered_by_its_error(service: Service) -> None:
    """The exactly-once contract puts a record in one part only; one found in both (here
    written by hand) failed, as in an OpenAI batch (`sinks.answers`, rule 1). The buffer
    once answered it with its output row."""
    service.post(records({"a": 1.0, "b": 2.0}))
    service.jobs.run_now = False
    service.flusher.table.claim_batch("acme", "double", "batch-both", 10)
    service.flusher.submit_batch("batch-both", "acme", "double")
    service.state.on_job_finished.clear()  # the job ends, its records not settled yet
    service.jobs.run_queued()
    job = service.state.store.job(service.get("a").json()["job_id"])
    errors = Path(job.spec.sink.uri) / "_errors" / "part-99999.jsonl"
    errors.parent.mkdir(exist_ok=True)
    bad = {"source": "x", "stage": "predict", "error": "ValueError", "message": "half", "id": "a"}
    errors.write_text(json.dumps(bad) + "\n")
    service.flusher.reconcile()
    got = service.get("a").json()
    assert got["status"] == "failed" and "output" not in got, got
    assert got["error"] == {"stage": "predict", "error": "ValueError", "message": "half"}
    assert service.get("b").json()["output"] == {"prediction": 4.0}
