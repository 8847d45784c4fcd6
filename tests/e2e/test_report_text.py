"""`thresher report` draws the data's own text as text: values that read as matplotlib
mathtext (`$$$\\undefinedcmd$`, `$x^$`) are labels in the charts, never parsed, through
the real `thresher run` and `thresher report`."""

from __future__ import annotations

import html
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .support import Workspace

pytestmark = pytest.mark.e2e

MODEL = (
    "class Scorer:\n    def predict(self, batch):\n        return {'prediction': batch['x'] * 2}\n"
)
MATHTEXT = ["$$$\\undefinedcmd$", "$x^$", "plain"]


def test_a_report_on_data_holding_mathtext_draws_it_as_plain_text(workspace: Workspace) -> None:
    rows = 300
    note = [MATHTEXT[i % len(MATHTEXT)] for i in range(rows)]
    table = pa.table({"id": range(rows), "x": [float(i) for i in range(rows)], "note": note})
    pq.write_table(table, workspace.root / "in.parquet")
    (workspace.root / "model.py").write_text(MODEL, encoding="utf-8")
    spec = workspace.spec(
        {
            "source": {"uri": "in.parquet", "id_column": "id"},
            "model": {"kind": "python", "uri": "model.py:Scorer", "batch_format": "numpy"},
            "sink": {"uri": "out/"},
        }
    )
    ran = workspace.run("run", spec)
    assert ran.returncode == 0, ran.stderr
    job = re.search(r"^job (\S+) succeeded", ran.stdout, re.MULTILINE)
    assert job is not None, ran.stdout

    report = workspace.root / "report.html"
    made = workspace.run("report", job[1], "-o", report)
    assert made.returncode == 0, made.stderr[-3000:]
    page = report.read_text(encoding="utf-8")
    assert "$x^$" in html.unescape(page)  # drawn as the text it is
