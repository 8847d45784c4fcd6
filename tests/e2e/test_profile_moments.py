"""A job's input profile is exact whichever way its moments were taken: on the way into a
model's input matrix (ONNX, scikit-learn), by compiled trees as they read the columns in
place, or by the profiler itself where rows never reached the model whole (a row with a
missing value is dropped from its batch, so its chunk is read again)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from .support import FAST, FEATURES, ID, Trained, Workspace, features, labels, make_table
from .test_cli import job_id

pytestmark = pytest.mark.e2e

ROWS = 6_000
MISSING_ROW = 4_321  # f3 is null here: the row goes to the error file, the others on


def lightgbm(workspace: Workspace, table: pa.Table) -> Trained:
    """A booster that thresher compiles (`compile = true`, so a failure to is an error)."""
    import lightgbm as lgb

    data = lgb.Dataset(features(table), labels(table), feature_name=FEATURES)
    booster = lgb.train({"objective": "binary", "verbose": -1}, data, num_boost_round=10)
    path = workspace.root / "model.txt"
    booster.save_model(str(path))
    section = {"kind": "lightgbm", "uri": path.name, "options": {"compile": True}}
    return Trained(section, path, lambda rows: {})


def with_a_missing_value(table: pa.Table) -> pa.Table:
    index = table.schema.get_field_index("f3")
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[MISSING_ROW] = True
    return table.set_column(index, "f3", pa.array(table.column("f3").to_numpy(), mask=mask))


def profiled(workspace: Workspace, trained: Trained) -> dict[str, Any]:
    spec = workspace.spec(
        {
            "source": {
                "uri": "customers.parquet",
                "id_column": ID,
                "columns": FEATURES,
                "shard_bytes": 65536,
            },
            "model": trained.section,
            "sink": {"uri": "out/"},
        }
    )
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 0, result.stderr
    shown = workspace.run("profile", job_id(result.stdout), "--json")
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


@pytest.mark.parametrize("model", ["onnx", "sklearn_skops", "lightgbm"])
def test_the_input_profile_is_exact_however_the_model_reads_its_inputs(
    workspace: Workspace, model: str, tmp_path: Path
) -> None:
    clean = make_table(ROWS, seed=3)
    trained = (
        lightgbm(workspace, clean) if model == "lightgbm" else getattr(workspace, model)(clean)
    )
    table = with_a_missing_value(clean)
    workspace.write_input(table, "parquet")

    profile = profiled(workspace, trained)

    assert profile["rows"] == ROWS
    for name in FEATURES:
        values = table.column(name).drop_null().to_numpy()
        column = profile["columns"][name]
        assert (column["rows"], column["nulls"]) == (ROWS, int(name == "f3"))
        assert (column["count"], column["nan"], column["inf"]) == (len(values), 0, 0)
        assert (column["min"], column["max"]) == (values.min(), values.max())
        assert column["mean"] == pytest.approx(values.mean(), rel=1e-12, abs=1e-15)
        assert column["std"] == pytest.approx(values.std(), rel=1e-9)
