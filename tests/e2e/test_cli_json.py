"""The `thresher` command as a script meets it: `run --json` (JSON lines: `started` while
the job runs, then `ended`), `status --json`, and `validate`, which checks and plans a job
and writes nothing. Every run is the real console script on real files."""

from __future__ import annotations

import json
import select
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .support import FAST, ID, KEEP, THRESHER, Workspace, make_table

pytestmark = pytest.mark.e2e

ROWS = 2000

MODELS = """
import os
import pathlib
import time


# Predicts once a file named `gate` stands beside this module (a minute at most), so the
# test sees the job running. It prints, from Python and as native code would: neither
# may land among the events on stdout.
class WaitsForGate:
    def predict(self, batch):
        print("the model says hello")
        os.write(1, b"native code says hello\\n")
        gate = pathlib.Path(__file__).with_name("gate")
        deadline = time.monotonic() + 60
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return {"prediction": 2.0 * batch["f0"].to_numpy()}


class DropsOne:
    def predict(self, batch):
        return {"prediction": [0.0] * (len(batch) - 1)}
"""


def job_spec(workspace: Workspace, model_class: str, **extra: Any) -> Path:
    """A job over a fresh Parquet input of ROWS rows (five shards) with a model of MODELS."""
    source = workspace.write_input(make_table(ROWS), "parquet")
    (workspace.root / "user_model.py").write_text(MODELS, encoding="utf-8")
    spec: dict[str, dict[str, Any]] = {
        "source": {"uri": source.name, "id_column": ID, "shard_bytes": 4096},
        "model": {"kind": "python", "uri": f"user_model.py:{model_class}"},
        "sink": {"uri": "out/", "keep_columns": [KEEP]},
    }
    for section, values in extra.items():
        spec.setdefault(section, {}).update(values)
    return workspace.spec(spec)


def events(stdout: str) -> list[dict[str, Any]]:
    """Every stdout line as JSON: a line that is not fails the test."""
    return [json.loads(line) for line in stdout.splitlines()]


def status_of(workspace: Workspace, *args: str) -> Any:
    result = workspace.run("status", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def read_line(stream: Any, timeout: float = 120) -> str:
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"no line on stdout within {timeout} s"
    return str(stream.readline())


# run --json and status --json


def test_run_json_tells_the_id_while_the_job_runs_then_how_it_ended(
    workspace: Workspace,
) -> None:
    spec = job_spec(workspace, "WaitsForGate")
    with (workspace.root / "stderr.txt").open("w") as stderr:
        job = subprocess.Popen(
            [str(THRESHER), "run", "--json", str(spec), *FAST],
            cwd=workspace.root,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            assert job.stdout is not None
            started = json.loads(read_line(job.stdout))
            assert started["event"] == "started"
            assert (started["shards"], started["rows"]) == (5, ROWS)
            running = status_of(workspace, started["job_id"])  # the model waits for the gate
            assert running["state"] == "running"
            assert running["shard_count"] == 5
            (workspace.root / "gate").touch()
            rest, _ = job.communicate(timeout=180)
        finally:
            job.kill()
            job.wait()
    log = (workspace.root / "stderr.txt").read_text()
    assert job.returncode == 0, log
    assert "the model says hello" in log and "native code says hello" in log  # not on stdout
    (ended,) = events(rest)
    assert ended["event"] == "ended"
    assert ended["job_id"] == started["job_id"]
    assert (ended["state"], ended["succeeded"], ended["problems"]) == ("succeeded", True, [])
    assert Path(ended["output"]).resolve() == (workspace.root / "out").resolve()
    manifest = ended["manifest"]
    assert manifest["job_id"] == started["job_id"]
    assert (manifest["rows_in"], manifest["rows_out"], manifest["rows_error"]) == (ROWS, ROWS, 0)
    on_disk = json.loads((workspace.root / "out" / "_SUCCESS").read_text())
    assert manifest == {k: v for k, v in on_disk.items() if k != "written_at"}  # the sink's

    (listed,) = status_of(workspace)
    assert listed["id"] == started["job_id"] and listed["state"] == "succeeded"
    assert listed["shards"] == {"pending": 0, "running": 0, "done": 5, "failed": 0}
    assert (listed["rows_in"], listed["rows_out"], listed["rows_error"]) == (ROWS, ROWS, 0)
    assert listed["created_at"] <= listed["finished_at"]
    assert listed["problems"] == []


def test_run_json_of_a_failing_job_ends_failed_with_exit_1(workspace: Workspace) -> None:
    result = workspace.run("run", "--json", job_spec(workspace, "DropsOne"), *FAST)
    assert result.returncode == 1, result.stderr
    started, ended = events(result.stdout)
    assert (started["event"], ended["event"]) == ("started", "ended")
    assert ended["job_id"] == started["job_id"]
    assert (ended["state"], ended["succeeded"]) == ("failed", False)
    assert ended["problems"] and all("returned" in p for p in ended["problems"])
    assert ended["manifest"]["shards_failed"] == 5
    assert not (workspace.root / "out" / "_SUCCESS").exists()

    failed = status_of(workspace, started["job_id"])
    assert failed["state"] == "failed"
    assert failed["shards"]["failed"] == 5
    assert len(failed["unfinished"]) == 5
    assert any(p.startswith("shard ") and "returned" in p for p in failed["problems"])


def test_run_json_of_a_spec_the_input_does_not_fit_ends_with_no_job(
    workspace: Workspace,
) -> None:
    spec = job_spec(workspace, "DropsOne", source={"columns": ["f0", "no_such_column"]})
    result = workspace.run("run", "--json", spec)
    assert result.returncode == 2
    (ended,) = events(result.stdout)
    assert (ended["event"], ended["job_id"], ended["state"]) == ("ended", None, "failed")
    assert ended["problems"][0].startswith("source.columns: no column 'no_such_column'")
    assert "source.columns" in result.stderr
    assert status_of(workspace) == []


# validate


def test_validate_shows_the_plan_and_writes_nothing(workspace: Workspace) -> None:
    spec = job_spec(workspace, "WaitsForGate")
    store = workspace.root / "thresher-store.db"  # tests/conftest.py: private_store
    result = workspace.run("validate", spec, *FAST)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    assert "5 shard(s), 2,000 rows" in result.stdout
    assert "2 worker(s) x 1 thread(s)" in result.stdout
    assert "executor local" in result.stdout

    as_json = workspace.run("validate", "--json", spec, *FAST)
    assert as_json.returncode == 0, as_json.stderr
    plan = json.loads(as_json.stdout)
    assert plan["valid"] is True
    assert (plan["shard_count"], plan["rows"]) == (5, ROWS)
    assert [s["rows"] for s in plan["shards"]] == [400] * 5
    assert plan["placement"]["workers"] == 2
    assert plan["executor"] == "local"
    assert plan["features"] == [f"f{i}" for i in range(6)]
    assert Path(plan["sink"]["uri"]).resolve() == (workspace.root / "out").resolve()

    assert not (workspace.root / "out").exists()
    assert not store.exists()  # not even created: no job, no tables
    assert status_of(workspace) == []


def test_validate_names_a_column_not_in_the_input_and_exits_2(workspace: Workspace) -> None:
    spec = job_spec(workspace, "WaitsForGate", source={"columns": ["f0", "no_such_column"]})
    result = workspace.run("validate", spec)
    assert result.returncode == 2
    assert "source.columns: no column 'no_such_column'" in result.stderr
    assert "Traceback" not in result.stderr

    as_json = workspace.run("validate", "--json", spec)
    assert as_json.returncode == 2
    verdict = json.loads(as_json.stdout)
    assert verdict["valid"] is False
    assert verdict["problems"][0].startswith("source.columns: no column 'no_such_column'")
    assert not (workspace.root / "out").exists()


def test_validate_names_a_missing_model_file_and_exits_2(workspace: Workspace) -> None:
    spec = job_spec(workspace, "WaitsForGate")
    result = workspace.run("validate", spec, "--set", "model.uri=nowhere/model.py:Gone")
    assert result.returncode == 2
    assert f"model.uri: {workspace.root}/nowhere/model.py is not a file" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (workspace.root / "out").exists()
