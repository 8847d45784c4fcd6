"""Traces: a job submitted with a `traceparent` joins the caller's trace, and its shards
the job's — HTTP request → job → shard, one tree, in OpenTelemetry's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_service_http import make_api

from thresher.coordinator.job import run_job
from thresher.worker import tracing

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.configure(exporter)
    try:
        yield exporter
    finally:
        tracing._state.clear()  # the next test's process state: tracing off again


def test_a_submitted_job_and_its_shards_join_the_callers_trace(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    api = make_api(tmp_path)
    with api.client:
        file_id = api.upload()["id"]
        body = {"input_file_id": file_id, "model": "double", "id_column": "id"}
        sent = api.client.post("/v1/jobs", json=body, headers={**api.auth(), "traceparent": CALLER})
        assert sent.status_code == 201, sent.text
        record = api.state.store.job(sent.json()["id"])
    assert record.spec.job.traceparent is not None
    result = run_job(record.spec, api.state.store, queued_id=record.id)  # as the scheduler does
    assert result.succeeded

    by_name: dict[str, list[Any]] = {}
    for span in spans.get_finished_spans():
        by_name.setdefault(span.name, []).append(span)
    (http,) = by_name["POST /v1/jobs"]
    (job,) = by_name["thresher.job"]
    (shard,) = by_name["thresher.shard"]
    assert {format(s.context.trace_id, "032x") for s in (http, job, shard)} == {TRACE}
    assert http.parent.span_id == int("00f067aa0ba902b7", 16)  # the caller's span
    assert job.parent.span_id == http.context.span_id
    assert shard.parent.span_id == job.context.span_id
    assert job.attributes["thresher.job_id"] == record.id
    assert (
        job.attributes["thresher.rows_out"] == 2 and job.attributes["thresher.state"] == "succeeded"
    )
    assert shard.attributes["thresher.rows_in"] == 2 and shard.attributes["thresher.attempt"] == 1
    assert http.attributes["thresher.status"] == 201


def test_off_without_the_environment_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    tracing._state.clear()
    with tracing.span("thresher.job", CALLER, job_id="j") as traced:
        traced.set(rows=1)
        assert tracing.current_traceparent() is None
    assert tracing._state["tracer"] is None
    tracing.flush()
