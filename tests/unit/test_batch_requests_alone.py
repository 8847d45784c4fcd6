"""A batch request whose body alone is wrong (an input that is not text, a bad
`encoding_format`, too many inputs) fails on its own, as at OpenAI: it is answered in
the error file with `response.status_code` 400 and the other lines run. Problems of the
file itself still fail the whole batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from thresher.openai.lines import MAX_INPUTS, prepare_lines
from thresher.service.background import batches
from thresher.service.config import ServerConfig, prepare
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import BatchRow, BatchStatus, FileRecord, JobState, now, open_store

pytestmark = pytest.mark.unit

MODEL = """
class Embed:
    def predict(self, batch):
        return {"embedding": [[1.0, 2.0]] * len(batch["input"])}
"""
LIMITS = (50_000, 200 * 1024**2)
GOOD = {"model": "embed", "input": "x"}
# custom_id -> a body wrong on its own, and the param OpenAI names
ALONE: dict[str, tuple[dict[str, Any], str]] = {
    "number": ({"model": "embed", "input": 12345}, "body.input"),
    "format": ({"model": "embed", "input": "x", "encoding_format": "hex"}, "body.encoding_format"),
    "wide": ({"model": "embed", "input": ["x"] * (MAX_INPUTS + 1)}, "body.input"),
}


def request(custom_id: str, body: dict[str, Any], url: str = "/v1/embeddings") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_a_request_wrong_on_its_own_is_set_aside_not_a_problem_of_the_file(
    tmp_path: Path,
) -> None:
    lines = [request("a", GOOD), *(request(cid, body) for cid, (body, _) in ALONE.items())]
    lines.append(request("z", GOOD))
    source = write_lines(tmp_path / "in.jsonl", lines)
    dest = tmp_path / "rows.jsonl"
    found = prepare_lines(source, dest, "/v1/embeddings", {"embed": "python"}, LIMITS)
    assert found.problems == [] and found.requests == 5
    assert [(p.request, p.line, p.param) for p in found.rejected] == [
        (cid, n, param) for n, (cid, (_, param)) in enumerate(ALONE.items(), start=2)
    ]
    rows = [json.loads(line) for line in dest.read_text().splitlines()]
    assert [(r["custom_id"], r["line"]) for r in rows] == [("a", 1), ("z", 5)]


def test_file_level_problems_still_fail_the_batch(tmp_path: Path) -> None:
    lines = [
        request("a", {"model": "embed", "input": 12345}),
        request("a", GOOD),  # a repeated custom_id
        request("c", GOOD, url="/v1/completions"),
        "{not json",
        request("e", {"model": "other", "input": "x"}),
    ]
    source = write_lines(tmp_path / "in.jsonl", lines)
    found = prepare_lines(source, tmp_path / "rows.jsonl", "/v1/embeddings", {"embed": "x"}, LIMITS)
    assert [(p.code, p.line) for p in found.problems] == [
        ("duplicate_custom_id", 2),
        ("mismatched_endpoint", 3),
        ("invalid_json_line", 4),
        ("mismatched_model", 5),
    ]


def service(tmp_path: Path) -> ServiceState:
    (tmp_path / "embed.py").write_text(MODEL)
    model = ModelSection(kind="python", uri=f"{tmp_path / 'embed.py'}:Embed")
    config = prepare(ServerConfig(data_dir=tmp_path / "data", models={"embed": model}))
    return ServiceState(open_store(f"sqlite:///{tmp_path / 'store.db'}"), config, tmp_path)


def create_batch(state: ServiceState, source: Path) -> BatchRow:
    size = source.stat().st_size
    record = FileRecord("file-1", "acme", "in", "jsonl", size, "-", str(source), now(), "batch")
    state.store.files.add(record)
    batch = BatchRow(
        "batch_1", "acme", "file-1", "/v1/embeddings", "24h", BatchStatus.VALIDATING, 1
    )
    state.store.batches.create(batch)
    return batch


def error_lines(state: ServiceState, batch: BatchRow) -> list[dict[str, Any]]:
    ended = state.store.batches.find(batch.id, "acme")
    assert ended is not None and ended.error_file_id is not None
    record = state.store.files.find("acme", ended.error_file_id)
    assert record is not None
    return [json.loads(line) for line in Path(record.path).read_text().splitlines()]


def test_a_batch_of_requests_that_all_fail_alone_completes_with_each_answered_400(
    tmp_path: Path,
) -> None:
    state = service(tmp_path)
    lines = [request(cid, body) for cid, (body, _) in ALONE.items()]
    batch = create_batch(state, write_lines(tmp_path / "in.jsonl", lines))
    worker = batches.BatchWorker(state)
    worker.step()  # validated: nothing to run
    worker.step()  # answered
    ended = state.store.batches.find(batch.id, "acme")
    assert ended is not None and ended.status == BatchStatus.COMPLETED
    assert state.store.jobs() == [] and ended.output_file_id is None
    assert ended.counts == {"total": 3, "completed": 0, "failed": 3}
    answers = error_lines(state, batch)
    assert [a["custom_id"] for a in answers] == list(ALONE)
    for answer, (_, param) in zip(answers, ALONE.values(), strict=True):
        response = answer["response"]
        assert response["status_code"] == 400 and answer["error"] is None
        assert param in response["body"]["error"]["message"]


def test_the_other_lines_of_a_batch_run_and_every_line_is_answered_once(tmp_path: Path) -> None:
    state = service(tmp_path)
    lines = [request("a", GOOD), *(request(cid, body) for cid, (body, _) in ALONE.items())]
    batch = create_batch(state, write_lines(tmp_path / "in.jsonl", lines))
    worker = batches.BatchWorker(state)
    worker.step()
    (job,) = state.store.jobs()
    running = state.store.batches.find(batch.id, "acme")
    assert running is not None and running.status == BatchStatus.IN_PROGRESS
    assert running.counts == {"total": 4, "completed": 0, "failed": 0}
    state.store.request_cancel(job.id)  # a queued job: cancelled now, "a" never runs
    assert state.store.job(job.id).state == JobState.CANCELLED
    worker.step()
    answers = error_lines(state, batch)
    assert [a["custom_id"] for a in answers] == ["a", *ALONE]  # in line order, once each
    assert answers[0]["response"] is None and answers[0]["error"]["code"] == "batch_failed"
    assert all(a["response"]["status_code"] == 400 for a in answers[1:])
