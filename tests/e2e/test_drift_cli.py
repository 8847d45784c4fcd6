"""`thresher drift` as a pipeline meets it: two real `thresher run` jobs (the second with one
feature shifted), then the report as a table and as JSON, `--fail-on-drift`'s exit code,
a job name for the newest run, and the training file as the baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from .support import FAST, FEATURES, ID, KEEP, Workspace, make_table
from .test_cli import job_id

pytestmark = pytest.mark.e2e

ROWS = 20_000

MODEL = """
import numpy as np


class Scorer:
    def predict(self, batch):
        f0 = np.asarray(batch["f0"])
        return {"score": 2.0 * f0, "label": (f0 > 0.5).astype(np.int64)}
"""


def shifted(table: pa.Table, column: str, by: float) -> pa.Table:
    index = table.schema.get_field_index(column)
    return table.set_column(index, column, pc.add(table.column(column), by))


def run_nightly(workspace: Workspace, table: pa.Table, night: int) -> str:
    name = f"night-{night}"
    workspace.write_input(table, "parquet", name)
    (workspace.root / "scorer.py").write_text(MODEL, encoding="utf-8")
    spec = workspace.spec(
        {
            "job": {"name": "nightly"},
            "source": {"uri": f"{name}.parquet", "id_column": ID, "shard_bytes": 65536},
            "model": {"kind": "python", "uri": "scorer.py:Scorer", "batch_format": "numpy"},
            "sink": {"uri": f"out-{night}/", "keep_columns": [KEEP]},
        },
        name=f"{name}.toml",
    )
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 0, result.stderr
    return job_id(result.stdout)


def drift_json(workspace: Workspace, *args: str) -> dict[str, Any]:
    result = workspace.run("drift", *args, "--json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_drift_between_two_nightly_runs_and_against_the_training_file(
    workspace: Workspace,
) -> None:
    training = make_table(ROWS, seed=0)
    first = run_nightly(workspace, make_table(ROWS, seed=1), 1)
    second = run_nightly(workspace, shifted(make_table(ROWS, seed=2), "f2", 1.0), 2)

    report = drift_json(workspace, first, second)
    verdicts = {c["name"]: c["verdict"] for c in report["columns"]}
    assert verdicts == {
        **dict.fromkeys(FEATURES, "ok"),
        "f2": "drift",
        "score": "ok",
        "label": "ok",
    }
    assert report["verdict"] == "drift"
    f2 = next(c for c in report["columns"] if c["name"] == "f2")
    assert f2["psi"] >= report["thresholds"]["psi_drift"] == 0.25
    assert f2["ks"] > f2["ks_bound"] > 0 and f2["p_adjusted"] < 0.05 and len(f2["edges"]) == 9
    assert {s["label"] for s in report["class_shares"]["label"]} == {"0", "1"}
    assert report["rows"] == {"baseline": ROWS, "current": ROWS}

    table = workspace.run("drift", first, second, "--fail-on-drift")
    assert table.returncode == 1, table.stderr
    assert "f2" in table.stdout and "drift" in table.stdout and "PSI" in table.stdout
    assert "verdict: drift" in table.stdout
    same = workspace.run("drift", first, first, "--fail-on-drift")
    assert same.returncode == 0 and "verdict: ok" in same.stdout

    # A job name is its newest succeeded job; only some columns, on request.
    named = drift_json(workspace, first, "nightly", "--columns", "f2,f3")
    assert [c["name"] for c in named["columns"]] == ["f2", "f3"]
    assert named["current"].startswith(second)

    # The training data as the baseline: its columns no job input has are listed.
    workspace.write_input(training, "parquet", "training")
    against_training = drift_json(workspace, "training.parquet", second)
    assert {c["name"]: c["verdict"] for c in against_training["columns"]}["f2"] == "drift"
    assert {c["name"]: c["verdict"] for c in against_training["columns"]}["f1"] == "ok"
    assert set(against_training["removed"]) == {ID, KEEP}
    assert drift_json(workspace, "training.parquet", first)["verdict"] == "ok"


def test_drift_refuses_what_it_cannot_find(workspace: Workspace, tmp_path: Path) -> None:
    result = workspace.run("drift", "no-such-job", "nightly")
    assert result.returncode == 2
    assert "no job, succeeded job named, or file 'nightly'" in result.stderr
