"""The service's OpenAI batch worker and the checks of a batch file: the server's limits,
a model that cannot answer the batch's endpoint, and a batch cancelled while its lines
were being checked (its job, made just then, must not run)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from thresher.openai.lines import answers, prepare_lines
from thresher.service.background import batches
from thresher.service.config import ServerConfig, prepare
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import (
    BatchRow,
    BatchStatus,
    FileRecord,
    JobState,
    now,
    open_store,
)

pytestmark = pytest.mark.unit

MODEL = """
class Embed:
    def predict(self, batch):
        return {"embedding": [[1.0, 2.0]] * len(batch["input"])}
"""
LIMITS = (50_000, 200 * 1024**2)


def request(custom_id: str, model: str, url: str = "/v1/embeddings") -> str:
    body = {"model": model, "input": "x"}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def batch_file(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def codes(found: Any) -> list[tuple[str, int | None]]:
    return [(p.code, p.line) for p in found.problems]


def service(tmp_path: Path, **settings: Any) -> ServiceState:
    """A server's state (no threads) serving the `embed` model to any tenant."""
    (tmp_path / "embed.py").write_text(MODEL)
    model = ModelSection(kind="python", uri=f"{tmp_path / 'embed.py'}:Embed")
    config = prepare(ServerConfig(data_dir=tmp_path / "data", models={"embed": model}, **settings))
    return ServiceState(open_store(f"sqlite:///{tmp_path / 'store.db'}"), config, tmp_path)


@dataclass
class BatchApi:
    """The HTTP app over a state, as tenant acme."""

    client: Any
    auth: dict[str, str]

    def create(self, **fields: Any) -> Any:
        """Upload a one-line batch file and create a batch over it."""
        lines = (request("a", "embed") + "\n").encode()
        files = {"file": ("in", lines)}
        upload = self.client.post(
            "/v1/files", data={"purpose": "batch"}, files=files, headers=self.auth
        )
        body = {"input_file_id": upload.json()["id"], "endpoint": "/v1/embeddings"}
        body |= {"completion_window": "24h", **fields}
        return self.client.post("/v1/batches", json=body, headers=self.auth)


@contextlib.contextmanager
def batch_api(state: ServiceState) -> Iterator[BatchApi]:
    from fastapi.testclient import TestClient

    from thresher.service.app import create_app
    from thresher.service.policies.auth import create_token

    auth = {"Authorization": f"Bearer {create_token(state.store, 'acme')}"}
    with TestClient(create_app(state, background=False)) as client:
        yield BatchApi(client, auth)


def test_a_file_over_the_byte_limit_fails_unread(tmp_path: Path) -> None:
    source = batch_file(tmp_path / "in.jsonl", request("a", "m"), "{not json")
    found = prepare_lines(source, tmp_path / "rows.jsonl", "/v1/embeddings", {"m": "x"}, (9, 10))
    assert codes(found) == [("file_too_large", None)]
    assert found.requests == 0 and not (tmp_path / "rows.jsonl").exists()


def test_the_limits_let_a_file_at_them_through(tmp_path: Path) -> None:
    source = batch_file(tmp_path / "in.jsonl", request("a", "m"), request("b", "m"))
    size = source.stat().st_size
    found = prepare_lines(source, tmp_path / "rows.jsonl", "/v1/embeddings", {"m": "x"}, (2, size))
    assert codes(found) == [] and found.requests == 2


@pytest.mark.parametrize(
    ("kind", "endpoint", "answered"),
    [
        ("sentence-transformers", "/v1/embeddings", True),
        ("python", "/v1/embeddings", True),
        ("llm", "/v1/embeddings", False),
        ("lightgbm", "/v1/embeddings", False),  # predictions, never vectors
        ("llm", "/v1/chat/completions", True),
        ("llm", "/v1/completions", True),
        ("sentence-transformers", "/v1/chat/completions", False),
    ],
)
def test_generation_takes_an_llm_and_embeddings_any_other_model(
    kind: str, endpoint: str, answered: bool
) -> None:
    assert answers(kind, endpoint) is answered


def test_a_model_named_first_on_a_line_is_reported_there(tmp_path: Path) -> None:
    source = batch_file(tmp_path / "in.jsonl", "", request("a", "chat"), request("b", "chat"))
    models = {"chat": "llm", "minilm": "sentence-transformers"}
    found = prepare_lines(source, tmp_path / "rows.jsonl", "/v1/embeddings", models, LIMITS)
    assert codes(found) == [("model_not_supported", 2)]
    found = prepare_lines(source, tmp_path / "rows.jsonl", "/v1/embeddings", {}, LIMITS)
    assert codes(found) == [("model_not_found", 2)]


def test_a_batch_cancelled_while_its_lines_are_checked_cancels_the_job_made_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = service(tmp_path)
    source = batch_file(tmp_path / "in.jsonl", request("a", "embed"), request("b", "embed"))
    size = source.stat().st_size
    record = FileRecord(
        "file-1", "acme", "in.jsonl", "jsonl", size, "-", str(source), now(), "batch"
    )
    state.store.files.add(record)
    table = state.store.batches
    created = int(time.time())
    batch = BatchRow(
        "batch_1", "acme", "file-1", "/v1/embeddings", "24h", BatchStatus.VALIDATING, created
    )
    table.create(batch)
    checked = batches.prepare_lines

    def cancelled_meanwhile(*args: Any) -> Any:
        found = checked(*args)
        assert table.move(batch.id, BatchStatus.VALIDATING, BatchStatus.CANCELLED)  # the route
        return found

    monkeypatch.setattr(batches, "prepare_lines", cancelled_meanwhile)
    batches.BatchWorker(state).step()
    after = table.find(batch.id, "acme")
    assert after is not None and after.status == BatchStatus.CANCELLED
    (job,) = state.store.jobs()
    assert job.state == JobState.CANCELLED


def test_a_batch_asks_for_its_jobs_priority_within_the_tenants_limit(tmp_path: Path) -> None:
    from thresher.service.config import TenantLimits

    state = service(tmp_path, tenants={"acme": TenantLimits(max_priority=5)})
    with batch_api(state) as api:
        refused = api.create(priority=6)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "priority"
        assert api.create(priority=5).json()["priority"] == 5
    batches.BatchWorker(state).step()
    (job,) = state.store.jobs()
    assert job.spec.job.priority == 5


def test_a_cancel_that_finds_its_batch_moved_on_stops_the_job_it_got(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The route read the batch as validating; before it moved it, the worker made its
    job. The cancel must still stop that job, not be dropped."""
    from dataclasses import replace

    from thresher.service.routers import batches as routes

    state = service(tmp_path)
    with batch_api(state) as api:
        batch_id = api.create().json()["id"]
        batches.BatchWorker(state).step()  # validated: in progress, with its job
        found = routes._tenant_batch
        stale = [replace(found(state, "acme", batch_id), status=BatchStatus.VALIDATING)]
        monkeypatch.setattr(routes, "_tenant_batch", lambda *a: stale.pop() if stale else found(*a))
        cancel = api.client.post(f"/v1/batches/{batch_id}/cancel", headers=api.auth)
        answer = cancel.json()
    assert answer["status"] == "cancelling"
    (job,) = state.store.jobs()
    assert job.state == JobState.CANCELLED


def test_two_servers_checking_one_batch_leave_its_shared_job_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers on one store both take a validating batch: the second finishes its
    check after the first moved the batch on, and its submission (idempotent by the
    batch's id) answers the first's job. It must leave that job alone: it is the
    batch's, running (found by scripts/stack.sh, two replicas on one PostgreSQL)."""
    state = service(tmp_path)
    with batch_api(state) as api:
        batch_id = api.create().json()["id"]
    table = state.store.batches
    stale = table.find(batch_id, "acme")
    assert stale is not None and stale.status == BatchStatus.VALIDATING
    batches.BatchWorker(state).step()  # the first server: in progress, with its job
    first = table.find(batch_id, "acme")
    assert first is not None and first.status == BatchStatus.IN_PROGRESS
    monkeypatch.setattr(type(table), "unfinished", lambda self: [stale])  # read before
    batches.BatchWorker(state).step()
    (job,) = state.store.jobs()
    assert job.id == first.job_id and job.state == JobState.QUEUED
    after = table.find(batch_id, "acme")
    assert after is not None and after.status == BatchStatus.IN_PROGRESS


def test_checking_a_batch_again_leaves_its_rows_whole_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another server sharing the data folder may check the same batch while the job
    made by the first already reads its rows: they are written aside and renamed in."""
    from thresher.openai import lines

    source = batch_file(tmp_path / "in.jsonl", request("a", "m"), request("b", "m"))
    dest = tmp_path / "rows.jsonl"
    assert not prepare_lines(source, dest, "/v1/embeddings", {"m": "x"}, LIMITS).problems
    before = dest.read_text()
    checked = lines._check_lines

    def while_checking(*args: Any) -> Any:
        assert dest.read_text() == before  # what the first job reads, whole
        return checked(*args)

    monkeypatch.setattr(lines, "_check_lines", while_checking)
    assert not prepare_lines(source, dest, "/v1/embeddings", {"m": "x"}, LIMITS).problems
    assert dest.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "rows.jsonl"]
