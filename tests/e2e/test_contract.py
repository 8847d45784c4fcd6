"""One contract, every source format, every sink and every model adapter.

Each case writes a real input file, trains and saves a real model, runs `thresher run` in
a subprocess with real worker processes, and checks the output against a direct call of
the same model on the same rows: every row once, in input order, joined to its id and keep
column, with a `_SUCCESS` manifest that says what ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from .support import FAST, FEATURES, ID, KEEP, Output, Trained, Workspace, make_table, sha256_of

pytestmark = pytest.mark.e2e

ROWS = 2000
BATCH = 256

PYTHON_MODEL = """
import numpy as np

FEATURES = ["f0", "f1", "f2", "f3", "f4", "f5"]


class LinearScorer:
    def __init__(self, bias=0.0):
        self.bias = bias
        self.weights = None

    def setup(self):
        self.weights = np.array([1.4, -1.9, 0.7, 0.1, 1.0, -0.5])

    def predict(self, batch):
        score = batch[FEATURES].to_numpy() @ self.weights + self.bias
        return {"prediction": (score > 0).astype(np.int64), "score": score}
"""


@dataclass(frozen=True)
class Case:
    source: str  # parquet | csv | jsonl
    sink: str  # parquet | csv | jsonl | sqlite
    model: str  # skops | joblib | onnx | python

    def __str__(self) -> str:
        return f"{self.source}-to-{self.sink}-{self.model}"


CASES = [
    *(Case(source, "parquet", "skops") for source in ("parquet", "csv", "jsonl")),
    *(Case("parquet", sink, "skops") for sink in ("csv", "jsonl", "sqlite")),
    *(Case("parquet", "parquet", model) for model in ("joblib", "onnx", "python")),
    Case("csv", "sqlite", "onnx"),
    Case("jsonl", "csv", "python"),
]


def train(workspace: Workspace, model: str, table: pa.Table) -> Trained:
    if model == "skops":
        return workspace.sklearn_skops(table)
    if model == "joblib":
        return workspace.sklearn_joblib(table)
    if model == "onnx":
        return workspace.onnx(table)
    return workspace.python(PYTHON_MODEL, "LinearScorer", options={"bias": 0.25})


def sink_section(sink: str) -> dict[str, Any]:
    if sink == "sqlite":
        return {"uri": "sqlite:///scores.db?table=scores", "keep_columns": [KEEP]}
    return {"uri": "out/", "format": sink, "keep_columns": [KEEP]}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_every_row_scored_once_in_order_like_a_direct_model_call(
    case: Case, workspace: Workspace
) -> None:
    table = make_table(ROWS, seed=len(str(case)))
    source = workspace.write_input(table, case.source)
    trained = train(workspace, case.model, table)
    source_section: dict[str, Any] = {
        "uri": source.name,
        "id_column": ID,
        "shard_bytes": 4096 if case.source == "parquet" else 65536,
    }
    if case.source == "csv":
        source_section["columns"] = FEATURES  # explicit here, inferred elsewhere
    spec = workspace.spec(
        {
            "job": {"name": f"contract-{case}"},
            "source": source_section,
            "model": trained.section,
            "sink": sink_section(case.sink),
        }
    )

    result = workspace.run("run", spec, *FAST, "--set", f"batch.size={BATCH}")

    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    if case.sink == "sqlite":
        output = workspace.read_sqlite(workspace.root / "scores.db", "scores")
        expected_rows = table.sort_by(ID)  # a table has no order: read it by id
        side = workspace.root / "scores.db.scores"
        assert not list(side.rglob("*.parquet")), "staged parts should be gone once ingested"
    else:
        out_dir = workspace.root / "out"
        output = workspace.read_dir(out_dir, case.sink)
        expected_rows = table  # parts in name order are input order
        assert len(list(out_dir.glob("part-*"))) > 1, "the run should have had several shards"
        assert not (out_dir / "_staging").exists()
    check_rows(output, expected_rows, trained)
    check_manifest(output, trained, workspace.root)


def check_rows(output: Output, rows: pa.Table, trained: Trained) -> None:
    expected = trained.expect(rows)
    got = output.table
    assert got.num_rows == rows.num_rows
    assert sorted(got.column_names) == sorted([ID, KEEP, *expected])
    assert got.column(ID).to_pylist() == rows.column(ID).to_pylist()
    assert got.column(KEEP).to_pylist() == rows.column(KEEP).to_pylist()
    for name, want in expected.items():
        values = got.column(name).to_numpy()
        if want.dtype.kind == "f":
            np.testing.assert_allclose(values, want, rtol=1e-6, atol=1e-12, err_msg=name)
        else:
            np.testing.assert_array_equal(values, want, err_msg=name)
    assert output.errors == []


def check_manifest(output: Output, trained: Trained, root: Path) -> None:
    manifest = output.manifest
    assert manifest is not None, "no _SUCCESS manifest"
    rows = output.table.num_rows
    assert manifest["job_id"]
    assert (manifest["rows_in"], manifest["rows_out"], manifest["rows_error"]) == (rows, rows, 0)
    uri = manifest["model"]["uri"]
    assert uri == f"{root}/{trained.section['uri']}"  # resolved against the spec's folder
    assert manifest["model"]["sha256"] == sha256_of(trained.file)
    assert manifest["batch_size"] == BATCH
    started = datetime.fromisoformat(manifest["started_at"])
    finished = datetime.fromisoformat(manifest["finished_at"])
    assert started <= finished
    assert manifest["rows_per_second"] > 0
