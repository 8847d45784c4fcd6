"""What a plug-in implies about the rest of a spec goes through hooks on the plug-in
(`Plugin.completes`, `Plugin.sink_format`), not validators written into `spec.py`: the
`openai-batch` source and sink use them, and so can a third party's."""

from __future__ import annotations

import ast
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from thresher import plugins
from thresher.errors import SpecError
from thresher.plugins import Kind, Plugin
from thresher.spec import JobSpec, parse_spec

pytestmark = pytest.mark.unit

SPEC_PY = Path(plugins.__file__).with_name("spec.py")


def complete_mine(spec: JobSpec) -> None:
    if spec.source.options.get("strict") and spec.sink.format != "jsonl":
        raise ValueError("sink.format: a strict mine source writes jsonl")
    spec.source.id_column = "key"
    spec.sink.keep_columns = ["when", *(c for c in spec.sink.keep_columns if c != "when")]


@pytest.fixture
def mine_source(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A third party's source plug-in, registered with both hooks."""
    module = types.ModuleType("mine_plugin")
    module.complete = complete_mine  # type: ignore[attr-defined]
    module.open_source = lambda *args: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mine_plugin", module)
    plugin = Plugin(
        Kind.SOURCE,
        "mine",
        "mine_plugin:open_source",
        completes="mine_plugin:complete",
        sink_format="jsonl",
    )
    found = dict(plugins.registry())
    found[("source", "mine")] = plugin
    monkeypatch.setattr(plugins, "registry", lambda: found)
    yield


def raw(**source: Any) -> dict[str, Any]:
    return {
        "source": {"uri": "in.data", "format": "mine", **source},
        "model": {"kind": "sklearn", "uri": "model.joblib"},
        "sink": {"uri": "out/"},
    }


def test_a_source_plugins_hooks_complete_the_spec(mine_source: None) -> None:
    spec = parse_spec(raw())
    assert spec.sink.format == "jsonl"  # the source's sink_format
    assert spec.source.id_column == "key" and spec.sink.keep_columns == ["when"]
    again = parse_spec(spec.model_dump())  # a stored spec, validated again on resume
    assert again.sink.keep_columns == ["when"]


def test_a_hooks_error_is_a_spec_error_naming_its_field(mine_source: None) -> None:
    spec = raw(options={"strict": True})
    spec["sink"]["format"] = "parquet"
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    assert any("sink.format: a strict mine source" in p for p in info.value.problems)


def test_an_openai_batch_source_is_completed_by_its_plugins_hook() -> None:
    spec = parse_spec(
        {
            "source": {"uri": "batch.jsonl", "format": "openai-batch"},
            "model": {"kind": "sentence-transformers", "uri": "models/minilm"},
            "sink": {"uri": "answers/"},
        }
    )
    assert spec.sink.format == "openai-batch" and spec.source.id_column == "custom_id"
    assert spec.source.options["endpoint"] == "/v1/embeddings"
    assert spec.sink.keep_columns[:2] == ["line", "index"]


def test_spec_py_knows_no_plugin_by_name() -> None:
    """spec.py imports no plug-in's module (openai/ once closed a circle with it)."""
    tree = ast.parse(SPEC_PY.read_text())
    imported = {
        node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("thresher")
    }
    assert not {m for m in imported if m.startswith("thresher.openai")}
