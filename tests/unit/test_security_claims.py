"""SECURITY.md's defences that no other test backed (issue 34): only a token's hash is
stored, a new store file is its user's alone whatever the umask, `/healthz` says 503 when
the store does not answer, an ended job the announcer cannot announce is given up after
`quarantine_after` looks while the others are announced, `thresher serve` refuses a
model whose loader module is not there, and an OpenAI batch line nested 200,000 deep
(checked in the server process, by Python's json, not by a native reader) is a bad line
of its own. Each fails with its defence taken away."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_operator_cli import never_serve, run

from thresher.openai.lines import prepare_lines
from thresher.service.app import create_app
from thresher.service.config import ServerConfig, prepare
from thresher.service.policies.auth import create_token, tenant_of
from thresher.service.state import ServiceState
from thresher.spec import JobSpec
from thresher.store import JobState, open_store

pytestmark = pytest.mark.unit


def test_the_store_keeps_a_tokens_hash_never_the_token(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = open_store(f"sqlite:///{path}")
    token = create_token(store, "acme")
    assert tenant_of(store, token) == "acme"
    store.db.close()
    kept = b"".join(p.read_bytes() for p in tmp_path.glob("store.db*"))  # WAL included
    assert hashlib.sha256(token.encode()).hexdigest().encode() in kept
    assert token.encode() not in kept and token.removeprefix("thr_").encode() not in kept


def test_a_new_store_file_is_its_users_alone_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "made" / "store.db"
    before = os.umask(0o022)  # what `thresher run` may be started with
    try:
        open_store(f"sqlite:///{path}").db.close()
    finally:
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def state_on(tmp_path: Path, **config: Any) -> ServiceState:
    settings = prepare(ServerConfig(data_dir=tmp_path / "data", **config))
    return ServiceState(open_store(f"sqlite:///{tmp_path / 'store.db'}"), settings, tmp_path)


def test_healthz_is_503_when_the_store_does_not_answer(tmp_path: Path) -> None:
    state = state_on(tmp_path)
    client = TestClient(create_app(state, background=False))
    assert client.get("/healthz").json() == {"status": "ok"}
    state.store.db.close()  # every query now raises, as a store gone away does
    answer = client.get("/healthz")
    assert answer.status_code == 503
    assert answer.json() == {"status": "unavailable"}


def test_an_ended_job_that_cannot_be_announced_is_given_up_and_others_are_announced(
    tmp_path: Path, job_spec: Callable[..., JobSpec]
) -> None:
    state = state_on(tmp_path, quarantine_after=2)
    announced: list[str] = []
    state.on_job_finished.append(lambda record: announced.append(record.id))
    spec = job_spec(job={"name": "j"})
    for job_id, tenant in (("poison", "evil"), ("good", "acme")):
        state.store.queue_job(job_id, spec, tenant=tenant)
        state.store.finish(job_id, JobState.SUCCEEDED, None, None)
    with sqlite3.connect(tmp_path / "store.db") as db:  # a record that no longer reads
        db.execute("UPDATE thresher_jobs SET spec = '{' WHERE id = 'poison'")

    assert state.announce_untold(grace=0) == 2  # both looked at; the poison raised
    assert announced == ["good"]
    assert state.store.announced.untold_jobs(0) == ["poison"]  # tried again next look
    state.announce_untold(grace=0)  # its second failure in a row: given up
    assert state.store.announced.untold_jobs(0) == []
    assert announced == ["good"]


def test_serve_refuses_a_model_whose_loader_module_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    never_serve(monkeypatch)
    config = tmp_path / "server.toml"
    config.write_text('[models.churn]\nkind = "no_such_package_xyz.loaders:load"\nuri = "m.bin"\n')
    code, said = run("serve", "--config", str(config), "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert code == 2, said
    assert "models.churn.kind" in said and "no_such_package_xyz.loaders" in said


def test_a_batch_line_nested_200000_deep_is_a_bad_line_not_a_crash(tmp_path: Path) -> None:
    good = {"custom_id": "a", "method": "POST", "url": "/v1/embeddings",
            "body": {"model": "m", "input": "x"}}  # fmt: skip
    source = tmp_path / "batch.jsonl"
    source.write_text(json.dumps(good) + "\n" + "[" * 200_000 + "]" * 200_000 + "\n")
    found = prepare_lines(source, tmp_path / "rows.jsonl", "/v1/embeddings", {"m": "x"}, (9, 10**7))
    assert [(p.code, p.line) for p in found.problems] == [("invalid_json_line", 2)]
