"""The job spec's published JSON Schema (schema/job-spec.schema.json, for editors) is the
one the pydantic models generate now, and it judges specs as thresher does."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import jsonschema
import pytest

from thresher.spec import parse_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "job_spec_schema", ROOT / "scripts" / "job_spec_schema.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_schema_is_the_generated_one() -> None:
    published = (ROOT / "schema" / "job-spec.schema.json").read_text(encoding="utf-8")
    assert published == generator().rendered(), (
        "schema/job-spec.schema.json is stale: run python scripts/job_spec_schema.py"
    )


def test_the_schema_accepts_a_good_spec_and_names_a_misspelt_key() -> None:
    schema = json.loads((ROOT / "schema" / "job-spec.schema.json").read_text(encoding="utf-8"))
    good = {
        "source": {"uri": "in.parquet", "id_column": "id", "columns": ["x"]},
        "model": {"kind": "sklearn", "uri": "model.skops"},
        "sink": {"uri": "out/", "mode": "append"},
        "batch": {"size": 1024},
    }
    parse_spec(good)  # thresher takes it too
    jsonschema.validate(good, schema)
    bad = {**good, "sink": {"uri": "out/", "mdoe": "append"}}
    with pytest.raises(jsonschema.ValidationError, match="mdoe"):
        jsonschema.validate(bad, schema)
