"""Property-based fuzzing of what parses untrusted text: the job spec (files, `--set`
overrides, byte sizes) and the request buffer's record lines over HTTP.

The invariant each time: a well-formed answer or an error that names what was wrong —
`SpecError` with one `field: problem` line per problem, a 4xx with `detail` — never any
other exception or a 500. Brief in CI (Hypothesis' default profile here: 60 examples);
`THRESHER_FUZZ_EXAMPLES=5000 pytest tests/unit/test_parser_fuzz.py` runs longer.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thresher.errors import SpecError
from thresher.service.app import create_app
from thresher.service.config import ServerConfig, prepare
from thresher.service.policies.auth import create_token
from thresher.service.state import ServiceState
from thresher.spec import ModelSection, apply_override, load_spec, parse_bytes, parse_spec
from thresher.store import open_store

EXAMPLES = int(os.environ.get("THRESHER_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# The spec's own words, so generated specs get past the first key often enough to reach
# the validators deeper down.
SECTIONS = ["job", "source", "model", "batch", "run", "sink", "errors", "notify"]
FIELDS = [
    "uri", "format", "id_column", "columns", "kind", "trust", "size", "max_size",
    "max_memory", "workers", "threads", "executor", "mode", "keep_columns", "name",
    "priority", "max_error_rate", "on_bad_input", "webhook", "options", "shard_bytes",
    "query", "key_column", "csv_delimiter", "batch_format", "outputs", "force", "staging",
]  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["python", "sklearn", "csv", "jsonl", "parquet", "1e400GB", "auto", "\0"])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
SPECS = st.dictionaries(
    st.sampled_from(SECTIONS) | st.text(max_size=8),
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), VALUES, max_size=6) | VALUES,
    max_size=7,
)
PROBLEM = re.compile(r"^\S.*?: \S", re.DOTALL)  # `field.path: what is wrong`


def check_problems(error: SpecError) -> None:
    assert error.problems, "a SpecError with no problem"
    for problem in error.problems:
        assert PROBLEM.match(problem), f"a problem that names no field: {problem!r}"


@FUZZ
@given(raw=SPECS)
def test_any_mapping_is_a_spec_or_a_spec_error_naming_fields(raw: dict[str, Any]) -> None:
    try:
        parse_spec(raw)
    except SpecError as error:
        check_problems(error)


@FUZZ
@given(text=st.text(max_size=300) | st.builds(json.dumps, SPECS))
def test_any_spec_file_is_a_spec_or_a_spec_error(tmp_path: Path, text: str) -> None:
    for suffix in (".toml", ".yaml", ".json"):
        path = tmp_path / f"job{suffix}"
        path.write_text(text, encoding="utf-8")
        try:
            load_spec(path)
        except SpecError as error:
            check_problems(error)


@FUZZ
@given(item=st.text(max_size=60) | st.builds("{}.{}={}".format, st.sampled_from(SECTIONS),
       st.sampled_from(FIELDS), st.text(max_size=20)))  # fmt: skip
def test_any_override_applies_or_is_a_spec_error(item: str) -> None:
    raw: dict[str, Any] = {"model": {"kind": "python"}}
    try:
        apply_override(raw, item)
    except SpecError as error:
        check_problems(error)


@FUZZ
@given(text=st.text(max_size=20) | st.from_regex(r"\A[0-9e.+-]{1,8} ?[KMGT]i?B\Z"))
def test_a_byte_size_is_a_finite_count_or_a_value_error(text: str) -> None:
    try:
        size = parse_bytes(text)
    except ValueError:
        return
    assert isinstance(size, int) and size >= 0 and math.isfinite(size)


# The request buffer, over HTTP (the real app, without its background threads).

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)  # what JSON can carry
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
RECORD = st.fixed_dictionaries(
    {"custom_id": st.text(max_size=12), "input": st.dictionaries(st.text(max_size=6), JSON)},
    optional={"model": st.sampled_from(["double", "nope"]) | st.text(max_size=5)},
)
BODIES = (
    RECORD
    | st.lists(RECORD, max_size=5)
    | st.fixed_dictionaries({"model": st.just("double"), "requests": st.lists(RECORD, max_size=5)})
    | JSON
)


@pytest.fixture
def buffer_api(tmp_path: Path) -> Iterator[tuple[TestClient, ServiceState, dict[str, str]]]:
    (tmp_path / "m.py").write_text("class M:\n    def predict(self, b):\n        return b\n")
    model = ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")
    config = prepare(
        ServerConfig(data_dir=tmp_path / "data", models={"double": model}, buffer={"double": {}})
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    state = ServiceState(store=store, config=config, data_dir=config.data_dir)
    headers = {"Authorization": f"Bearer {create_token(store, 'acme')}"}
    with TestClient(create_app(state, background=False)) as client:
        yield client, state, headers


@FUZZ
@given(body=BODIES)
def test_any_request_body_is_taken_whole_or_refused_naming_the_problem(
    buffer_api: tuple[TestClient, ServiceState, dict[str, str]], body: Any
) -> None:
    client, state, headers = buffer_api
    before = len(state.store.requests.waiting_groups())
    response = client.post("/v1/requests", json=body, headers=headers)
    assert response.status_code < 500, response.text
    if response.status_code == 202:
        taken = {r["custom_id"] for r in response.json()["data"]}
        for custom_id in taken:
            found = state.store.requests.get("acme", custom_id)
            assert found is not None and found.state == "waiting"
    else:
        assert response.json()["detail"], response.text
        assert len(state.store.requests.waiting_groups()) == before  # all or none
