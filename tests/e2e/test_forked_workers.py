"""CPU workers are forked from a zygote that loaded the model once (executors/zygote.py),
through the real CLI: the workers' parent is the zygote, a torch model is built once and
each worker runs it with its own thread count (no OpenMP hang after the fork), a worker
killed with SIGKILL is replaced from the zygote and its shard retried with every row
once, a model that fails to load fails the job with its error, and `run.start_method =
"spawn"` spawns every worker as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .support import THRESHER, latest_job, run_manifest, start_run, store_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROWS = 20_000

RECORDING = """
import os
import time


class Scaled:
    def __init__(self, pid_file, per_batch=0.0):
        self.pid_file, self.per_batch = pid_file, per_batch

    def setup(self):
        with open(self.pid_file, "a") as f:
            f.write(f"{os.getpid()} {os.getppid()}\\n")

    def predict(self, batch):
        time.sleep(self.per_batch)
        return {"y": batch["x"] * 3.0}
"""

# A torch module that says where it was built and where, with how many threads, it ran.
TORCH_MODULE = """
import os

import torch
from torch import nn


class Logged(nn.Module):
    def __init__(self, log, features=1):
        super().__init__()
        self.log = log
        self.net = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 1))
        with open(log, "a") as f:
            f.write(f"built {os.getpid()}\\n")

    def forward(self, x):
        with open(self.log, "a") as f:
            f.write(f"ran {os.getpid()} {os.getppid()} {torch.get_num_threads()}\\n")
        # Big enough for torch to use its OpenMP threads: a pool the zygote had run
        # would hang here.
        wide = torch.ones(256, 256) @ torch.ones(256, 256)
        return self.net(x) + 0.0 * wide.sum()
"""


def write_input(root: Path) -> None:
    x = np.arange(ROWS, dtype=np.float64)
    table = pa.table({"id": np.arange(ROWS), "x": x})
    pq.write_table(table, root / "in.parquet", row_group_size=ROWS // 4)  # a shard each


def recording_job(root: Path, start_method: str = "auto", per_batch: float = 0.0) -> Path:
    write_input(root)
    (root / "model.py").write_text(RECORDING)
    spec = root / "job.toml"
    spec.write_text(
        f'[source]\nuri = "in.parquet"\nid_column = "id"\nshard_bytes = 100000\n'
        '[model]\nkind = "python"\nuri = "model.py:Scaled"\nbatch_format = "numpy"\n'
        f'options = {{ pid_file = "{root / "pids"}", per_batch = {per_batch} }}\n'
        "[batch]\nsize = 1000\n"
        f'[run]\nworkers = 2\nstart_method = "{start_method}"\nmax_attempts = 3\n'
        '[sink]\nuri = "out/"\n'
    )
    return spec


def run(root: Path, spec: Path, timeout: float = 180) -> tuple[int, str]:
    """The CLI's exit code and what it said."""
    proc = start_run(root, spec)
    said, _ = proc.communicate(timeout=timeout)
    return proc.returncode, said


def recorded(root: Path) -> list[tuple[int, int]]:
    """(pid, parent pid) of each worker that set the model up, in order."""
    lines = (root / "pids").read_text().splitlines()
    return [(int(pid), int(parent)) for pid, parent in (line.split() for line in lines)]


def output(root: Path) -> pa.Table:
    return pq.read_table(sorted((root / "out").glob("part-*.parquet")))


@pytest.mark.parametrize("start_method", ["auto", "spawn"])
def test_workers_are_forked_from_one_zygote_unless_spawn_is_asked(
    tmp_path: Path, start_method: str
) -> None:
    spec = recording_job(tmp_path, start_method)
    proc = start_run(tmp_path, spec)
    said, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, said
    workers = recorded(tmp_path)
    parents = {parent for _, parent in workers}
    assert len({pid for pid, _ in workers}) == 2
    forked = start_method == "auto"
    assert run_manifest(tmp_path)["workers_forked"] is forked
    if forked:  # the CLI's grandchildren, through the one zygote
        assert len(parents) == 1 and proc.pid not in parents, parents
        assert "forked from one model load" in said
    else:
        assert parents == {proc.pid}
    assert output(tmp_path).column("id").to_pylist() == list(range(ROWS))
    np.testing.assert_array_equal(output(tmp_path).column("y").to_numpy(), np.arange(ROWS) * 3.0)


def test_a_torch_model_is_built_once_and_run_with_each_workers_threads(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    write_input(tmp_path)
    (tmp_path / "nets.py").write_text(TORCH_MODULE)
    log = tmp_path / "log"
    sys.path.insert(0, str(tmp_path))
    try:
        from nets import Logged  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    torch.manual_seed(5)
    module = Logged(str(tmp_path / "unused")).eval()
    save_file(module.state_dict(), str(tmp_path / "weights.safetensors"))
    spec = tmp_path / "job.toml"
    # One worker of several shards on this machine's cores: the worker runs with every core's
    # thread while the zygote built the model at one.
    spec.write_text(
        '[source]\nuri = "in.parquet"\nid_column = "id"\nshard_bytes = 100000\n'
        f'[model]\nkind = "torch"\nuri = "{tmp_path / "nets.py"}:Logged"\n'
        f'options = {{ log = "{log}", weights = "weights.safetensors", device = "cpu" }}\n'
        "[batch]\nsize = 2000\n[run]\nworkers = 1\n"
        '[sink]\nuri = "out/"\n'
    )
    code, said = run(tmp_path, spec, timeout=240)
    assert code == 0, said
    lines = [line.split() for line in log.read_text().splitlines()]
    built = {int(words[1]) for words in lines if words[0] == "built"}
    ran = {(int(w[1]), int(w[2]), int(w[3])) for w in lines if w[0] == "ran"}
    assert len(built) == 1, f"the model was built more than once: {built}"
    (zygote,) = built
    threads = run_manifest(tmp_path)["threads_per_worker"]
    assert {(parent, count) for _, parent, count in ran} == {(zygote, threads)}
    assert all(pid != zygote for pid, _, _ in ran)
    with torch.inference_mode():
        expected = module.net(torch.arange(ROWS, dtype=torch.float32).reshape(-1, 1))
    out = output(tmp_path)
    assert out.column("id").to_pylist() == list(range(ROWS))
    np.testing.assert_allclose(
        out.column("prediction").to_numpy(), expected.numpy().ravel(), rtol=1e-5
    )


def test_a_killed_worker_is_forked_again_and_its_shard_retried(tmp_path: Path) -> None:
    spec = recording_job(tmp_path, per_batch=0.15)
    proc = start_run(tmp_path, spec)
    pids = tmp_path / "pids"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (pids.exists() and pids.read_text().strip()):
        time.sleep(0.05)
    victim = int(pids.read_text().split()[0])
    time.sleep(0.5)  # into its first shard
    os.kill(victim, signal.SIGKILL)
    said, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, said
    workers = recorded(tmp_path)
    assert len(workers) == 3, "a replacement worker started"
    assert len({parent for _, parent in workers}) == 1, "the replacement came from the zygote"
    assert "exit code -9" in said
    assert Counter(output(tmp_path).column("id").to_pylist()) == Counter(range(ROWS))


def test_a_model_that_fails_to_load_in_the_zygote_fails_the_job(tmp_path: Path) -> None:
    write_input(tmp_path)
    (tmp_path / "nets.py").write_text(TORCH_MODULE)
    (tmp_path / "weights.safetensors").write_bytes(b"not safetensors")
    spec = tmp_path / "job.toml"
    spec.write_text(
        f'[source]\nuri = "in.parquet"\nid_column = "id"\nshard_bytes = 100000\n'
        f'[model]\nkind = "torch"\nuri = "{tmp_path / "nets.py"}:Logged"\n'
        f'options = {{ log = "{tmp_path / "log"}", weights = "weights.safetensors" }}\n'
        '[run]\nworkers = 2\n[sink]\nuri = "out/"\n'
    )
    code, said = run(tmp_path, spec)
    assert code != 0
    assert "weights.safetensors" in said
    assert not (tmp_path / "out" / "_SUCCESS").exists()


SLOW_TO_BUILD = """
import time

from torch import nn


class Slow(nn.Module):
    def __init__(self, seconds):
        super().__init__()
        self.net = nn.Linear(1, 1)
        time.sleep(seconds)  # a large model's load

    def forward(self, x):
        return self.net(x)
"""


def test_a_cancel_while_the_zygote_loads_is_answered_at_once(tmp_path: Path) -> None:
    """The coordinator never waits on the zygote's loading: a cancel lands in seconds."""
    import torch
    from safetensors.torch import save_file

    write_input(tmp_path)
    (tmp_path / "slow.py").write_text(SLOW_TO_BUILD)
    save_file(torch.nn.Linear(1, 1).state_dict(), str(tmp_path / "w.safetensors"))
    spec = tmp_path / "job.toml"
    spec.write_text(
        '[source]\nuri = "in.parquet"\nid_column = "id"\nshard_bytes = 100000\n'
        f'[model]\nkind = "torch"\nuri = "{tmp_path / "slow.py"}:Slow"\n'
        '[model.options]\nseconds = 120\nweights = "w.safetensors"\ndevice = "cpu"\n'
        '[run]\nworkers = 2\n[sink]\nuri = "out/"\n'
    )
    proc = start_run(tmp_path, spec)
    try:
        deadline = time.monotonic() + 60
        job_id = None
        while job_id is None and time.monotonic() < deadline:
            time.sleep(0.2)
            job_id = latest_job(tmp_path)
        assert job_id, "the job was never recorded"
        time.sleep(2)  # the zygote is building the model now
        cancel = subprocess.run(
            [THRESHER, "cancel", job_id],
            env=store_env(tmp_path),
            capture_output=True,
            text=True,
            check=False,
        )
        assert cancel.returncode == 0, cancel.stderr
        asked = time.monotonic()
        assert proc.wait(timeout=60) == 1
        assert time.monotonic() - asked < 20, "the cancel waited for the model to load"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert not (tmp_path / "out" / "_SUCCESS").exists()
