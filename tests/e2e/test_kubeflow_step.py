"""The Kubeflow step's container command, taken from the compiled pipeline YAML and run
here with `sh` as the pipeline's launcher would run it in the container: a real job, its
`ended` event in the step's output, its exit code the step's."""

# No `from __future__ import annotations`: kfp reads the pipeline's annotations as objects.
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .support import FEATURES, ID, Workspace, make_table, to_toml

pytestmark = [pytest.mark.e2e]


def compiled_container(tmp_path: Path) -> dict[str, Any]:
    from kfp import compiler, dsl

    from thresher.integrations.kubeflow import thresher_step

    score = thresher_step()

    @dsl.pipeline(name="scores")
    def scores(spec: str) -> None:
        score(spec=spec).set_caching_options(False)

    compiler.Compiler().compile(scores, str(tmp_path / "scores.yaml"))
    pipeline = yaml.safe_load((tmp_path / "scores.yaml").read_text())
    (executor,) = pipeline["deploymentSpec"]["executors"].values()
    return dict(executor["container"])


def run_step(container: dict[str, Any], spec: str, result: Path, store: Path) -> int:
    """The container's command with the launcher's placeholders filled in."""
    filled = {
        "{{$.inputs.parameters['spec']}}": spec,
        "{{$.outputs.parameters['result'].output_file}}": str(result),
    }
    args = [filled[a] for a in container["args"]]
    bin_dir = str(Path(sys.executable).parent)  # where `thresher` is, as in the image
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "THRESHER_STORE": f"sqlite:///{store}",
    }
    command = [*container["command"], *args]
    return subprocess.run(command, env=env, timeout=180, check=False).returncode


def test_the_step_runs_a_job_and_hands_on_how_it_ended(workspace: Workspace) -> None:
    root = workspace.root
    table = make_table(300)
    data = workspace.write_input(table, "parquet")
    model = workspace.sklearn_skops(table)
    spec = {
        "source": {"uri": str(data), "id_column": ID, "columns": FEATURES},
        "model": {**model.section, "uri": str(model.file)},
        "sink": {"uri": str(root / "scores"), "format": "parquet"},
    }
    container = compiled_container(root)
    result = root / "outputs" / "result"
    assert run_step(container, to_toml(spec), result, root / "store.db") == 0
    ended = json.loads(result.read_text())
    assert ended["event"] == "ended" and ended["state"] == "succeeded", ended
    assert ended["manifest"]["rows_out"] == 300
    assert len(workspace.read_dir(root / "scores", "parquet").table) == 300

    bad = {**spec, "source": {**spec["source"], "uri": str(root / "missing.parquet")}}
    failed = root / "outputs" / "failed"
    assert run_step(container, to_toml(bad), failed, root / "store.db") == 2  # a bad input
    assert json.loads(failed.read_text())["succeeded"] is False
