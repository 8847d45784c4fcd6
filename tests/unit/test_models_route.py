"""`GET /v1/models`: the models a tenant may name, as the official OpenAI client reads
them (`client.models.list()`, `retrieve()`), through the whole app in this process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from fastapi.testclient import TestClient
from openai import OpenAI

from thresher.service.app import create_app
from thresher.service.config import ServerConfig, prepare
from thresher.service.policies.auth import create_token
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import open_store

pytestmark = pytest.mark.unit


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    (tmp_path / "double.py").write_text(
        "class Double:\n    def predict(self, b):\n        return b\n"
    )
    model = ModelSection(kind="python", uri=f"{tmp_path / 'double.py'}:Double")
    config = prepare(
        ServerConfig(data_dir=tmp_path / "data", models={"double": model, "credit": model})
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    state = ServiceState(store=store, config=config, data_dir=config.data_dir)
    with TestClient(create_app(state, background=False)) as client:
        yield client, create_token(store, "acme")


def test_the_official_client_lists_and_retrieves_the_registered_models(
    site: tuple[TestClient, str],
) -> None:
    """`client.models.list()` was a 404."""
    http, token = site
    client = OpenAI(api_key=token, base_url="http://testserver/v1", http_client=http)
    listed = client.models.list()
    assert [m.id for m in listed.data] == ["credit", "double"]
    for model in listed.data:
        assert (model.object, model.owned_by) == ("model", "thresher")
        assert abs(model.created - time.time()) < 60
    assert client.models.retrieve("credit").id == "credit"
    with pytest.raises(openai.NotFoundError, match="no model 'nope'"):
        client.models.retrieve("nope")


def test_the_answer_is_openais_list_shape_and_needs_a_token(
    site: tuple[TestClient, str],
) -> None:
    http, token = site
    answer = http.get("/v1/models", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200
    body = answer.json()
    assert body["object"] == "list"
    assert [sorted(m) for m in body["data"]] == [["created", "id", "object", "owned_by"]] * 2
    assert "uri" not in answer.text and "double.py" not in answer.text  # the server's own
    assert http.get("/v1/models").status_code == 401
