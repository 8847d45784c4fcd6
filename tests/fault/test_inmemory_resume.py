"""A `thresher.run(data=..., model=...)` job whose process is killed mid-job is finished
by `thresher.resume(job_id, data=..., model=...)` in a new process given the same frame
and model: every row once in the output. Other data is refused, naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.e2e.support import THRESHER

pytestmark = [pytest.mark.fault, pytest.mark.slow]

ROWS = 200_000

# The same seeded frame and model in each process, as a notebook run again would make.
SETUP = f"""
import os, sys
import numpy as np, pandas as pd
from sklearn.linear_model import LogisticRegression
import thresher

rng = np.random.default_rng(int(os.environ.get("SEED", "0")))
X = pd.DataFrame(rng.normal(size=({ROWS}, 3)), columns=["a", "b", "c"])
fit = pd.DataFrame(np.random.default_rng(9).normal(size=(500, 3)), columns=["a", "b", "c"])
model = LogisticRegression().fit(fit, (fit.a > 0).astype(int))
"""
RUN = "thresher.run(data=X, model=model, sink=sys.argv[1], workers=2, shard_bytes=1024)\n"
RESUME = """
result = thresher.resume(sys.argv[1], data=X, model=model)
print(result.state.value, result.manifest["rows_out"])
"""


def python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_a_killed_in_memory_job_resumes_with_the_same_data_and_model(tmp_path: Path) -> None:
    out = tmp_path / "scores"
    killed = python(SETUP + RUN, str(out), env={"THRESHER_FAULT": "after_commit:1"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    listed = subprocess.run(
        [str(THRESHER), "status", "--json"], capture_output=True, text=True, check=True
    )
    [job] = json.loads(listed.stdout)
    assert job["state"] == "running"  # its process died holding it

    refused = python(SETUP + RESUME, job["id"], env={"SEED": "1"})
    assert refused.returncode != 0
    assert "data: not the data this job was planned with" in refused.stderr

    resumed = python(SETUP + RESUME, job["id"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert resumed.stdout.split() == ["succeeded", str(ROWS)]
    rows = pq.read_table(out, columns=["_row"]).column("_row").to_pylist()
    assert Counter(rows) == Counter(range(ROWS))  # every row, once
