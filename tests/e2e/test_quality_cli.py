"""Late actuals through the real CLI: `thresher run` a scikit-learn job with an id column,
`thresher actuals add` its labels in two parts (CSV, then a JSONL that overlaps it and
names an id the job never saw, then the CSV again), and `thresher quality --json` for
the job and for its name — the metrics equal scikit-learn's on the labelled rows."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pytest
from sklearn import metrics

from .support import FEATURES, ID, Workspace, labels, make_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def job_id(stdout: str) -> str:
    found = re.search(r"^job (\S+) succeeded", stdout, re.MULTILINE)
    assert found, stdout
    return found.group(1)


def test_actuals_in_parts_then_quality_equals_sklearns(workspace: Workspace) -> None:
    table = make_table(2000)
    data = workspace.write_input(table, "parquet")
    trained = workspace.sklearn_skops(table)
    spec = workspace.spec(
        {
            "job": {"name": "churn"},
            "source": {"uri": str(data), "id_column": ID, "columns": FEATURES},
            "model": trained.section,
            "sink": {"uri": str(workspace.root / "out"), "format": "csv"},
            "run": {"workers": 2},
        }
    )
    ran = workspace.run("run", spec)
    assert ran.returncode == 0, ran.stderr
    job = job_id(ran.stdout)
    truth = labels(table, seed=7)
    ids = table.column(ID).to_numpy()

    first = workspace.root / "week1.csv"
    first.write_text(
        "customer,churned\n"
        + "".join(f"{i},{y}\n" for i, y in zip(ids[:1200], truth[:1200], strict=True)),
        encoding="utf-8",
    )
    added = workspace.run(
        "actuals", "add", job, first, "--id-column", "customer", "--label-column", "churned",
        "--json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    part = json.loads(added.stdout)
    assert (part["new"], part["matched"], part["labelled"], part["predicted"]) == (
        True, 1200, 1200, 2000
    )  # fmt: skip

    second = workspace.root / "week2.jsonl"
    rows = [{ID: int(i), "churned": int(y)} for i, y in zip(ids[1000:], truth[1000:], strict=True)]
    rows.append({ID: 1, "churned": 0})  # an id the job never predicted
    second.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    added = workspace.run("actuals", "add", job, second, "--label-column", "churned")
    assert added.returncode == 0, added.stderr
    assert "1,001 rows: 800 labelled, 200 repeated, 1 unknown ids" in added.stdout, added.stdout
    assert "unknown ids: 1" in added.stdout
    assert "2,000 of 2,000 predicted ids labelled (100.0%)" in added.stdout

    again = workspace.run(
        "actuals", "add", job, first, "--id-column", "customer", "--label-column", "churned"
    )
    assert again.returncode == 0 and "nothing changed" in again.stdout, again.stdout

    shown = workspace.run("quality", job, "--json")
    assert shown.returncode == 0, shown.stderr
    quality = json.loads(shown.stdout)
    assert (quality["task"], quality["labelled"], quality["coverage"]) == (
        "classification",
        2000,
        1.0,
    )
    assert (quality["parts"], quality["unknown"], quality["repeated"]) == (2, 1, 200)
    assert quality["lag"]["first"] <= quality["lag"]["median"] <= quality["lag"]["last"]
    expect = trained.expect(table)
    got = quality["metrics"]
    assert got["average"] == "binary" and got["positive"] == "1"
    assert got["accuracy"] == pytest.approx(metrics.accuracy_score(truth, expect["prediction"]))
    assert got["f1"] == pytest.approx(metrics.f1_score(truth, expect["prediction"]))
    assert got["roc_auc"] == pytest.approx(metrics.roc_auc_score(truth, expect["proba_1"]))
    proba = np.column_stack([expect["proba_0"], expect["proba_1"]])
    assert got["log_loss"] == pytest.approx(metrics.log_loss(truth, proba))
    assert sum(b["count"] for b in got["calibration"]) == 2000

    trend = workspace.run("quality", "churn", "--json")
    assert trend.returncode == 0, trend.stderr
    assert [j["job_id"] for j in json.loads(trend.stdout)["jobs"]] == [job]
    table_view = workspace.run("quality", job)
    assert "roc_auc" in table_view.stdout and "calibration" in table_view.stdout


def test_bad_actuals_exit_2_naming_the_line_and_field(workspace: Workspace) -> None:
    data = workspace.write_input(pa.table({ID: [1, 2], "f0": [0.1, 0.2]}), "parquet")
    model = workspace.python(
        "class M:\n    def predict(self, batch):\n        return {'prediction': batch['f0'] * 2}\n",
        "M",
    )
    spec = workspace.spec(
        {
            "source": {"uri": str(data), "id_column": ID},
            "model": model.section,
            "sink": {"uri": str(workspace.root / "out")},
        }
    )
    ran = workspace.run("run", spec)
    assert ran.returncode == 0, ran.stderr
    bad = workspace.root / "bad.csv"
    bad.write_text(f"{ID},y\n1,0.5\n,0.7\n", encoding="utf-8")
    added = workspace.run("actuals", "add", job_id(ran.stdout), bad, "--label-column", "y")
    assert added.returncode == 2
    assert f"bad.csv line 3: id column '{ID}' is empty" in added.stderr, added.stderr
    missing = workspace.run("quality", "no-such-job-or-name")
    assert missing.returncode == 2 and "no succeeded job named" in missing.stderr
