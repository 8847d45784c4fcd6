"""The Ray executor on a real two-node Ray cluster on this machine.

The head listens on 127.0.0.2 and the worker node on 127.0.0.3 (both loopback: two
"hosts" without leaving the machine), started with `ray start` and Ray's token
authentication on. The coordinator is the real `thresher` CLI.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BIN = Path(sys.executable).parent
HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
ROWS = 12_000

MODEL = """
import time

class Scorer:
    def __init__(self, pause: float = 0.0, log: str = "") -> None:
        self.pause, self.log = pause, log

    def predict(self, batch):
        if self.log:  # which node this batch ran on
            import ray

            with open(self.log, "a") as f:
                f.write(ray.util.get_node_ip_address() + "\\n")
        time.sleep(self.pause)
        return {"score": batch["x0"] * 3.0 - batch["x1"]}
"""


@dataclass
class Cluster:
    address: str
    env: dict[str, str]
    head: subprocess.Popen[bytes]

    def add_worker_node(self) -> subprocess.Popen[bytes]:
        node = _ray_start([f"--address={self.address}", f"--node-ip-address={WORKER_IP}"], self.env)
        _wait_for_nodes(self, 2)
        return node


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HEAD_IP, 0))
        return int(s.getsockname()[1])


def _ray_start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`ray start --block` in a session of its own, so the node can be killed whole."""
    cmd = [str(BIN / "ray"), "start", "--block", "--num-cpus=1", "--disable-usage-stats", *args]
    return subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _alive_nodes(cluster: Cluster) -> int:
    probe = (
        "import ray, sys; ray.init(address=sys.argv[1], _node_ip_address=sys.argv[2],"
        " log_to_driver=False); print(sum(n['Alive'] for n in ray.nodes()))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, cluster.address, HEAD_IP],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return int(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 else 0


def _wait_for_nodes(cluster: Cluster, count: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while _alive_nodes(cluster) != count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the Ray cluster did not reach {count} live node(s)")
        time.sleep(1)


def _kill(node: subprocess.Popen[bytes]) -> None:
    if node.poll() is None:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A fresh head per test: a node killed by one test must not linger in the next."""
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONWARNINGS": "ignore",
    }
    address = f"{HEAD_IP}:{_free_port()}"
    head = _ray_start(
        [
            "--head",
            f"--node-ip-address={HEAD_IP}",
            f"--port={address.rsplit(':', 1)[1]}",
            "--include-dashboard=false",
        ],
        env,
    )
    found = Cluster(address, env, head)
    try:
        _wait_for_nodes(found, 1)
        yield found
    finally:
        _kill(head)
        # Ray's per-node helpers are children of the node's own session: killed above.


@pytest.fixture
def job(tmp_path: Path) -> Path:
    rng = np.random.default_rng(11)
    data = {"id": np.arange(ROWS, dtype=np.int64)}
    data |= {f"x{i}": rng.standard_normal(ROWS) for i in range(4)}
    pq.write_table(pa.table(data), tmp_path / "input.parquet", row_group_size=500)
    (tmp_path / "model.py").write_text(MODEL)
    spec = tmp_path / "job.toml"
    spec.write_text(
        '[source]\nuri = "input.parquet"\nid_column = "id"\nshard_bytes = 1024\n'
        '[model]\nkind = "python"\nuri = "model.py:Scorer"\nbatch_format = "numpy"\n'
        "[batch]\nsize = 250\n[run]\nworkers = 2\n"
        '[sink]\nuri = "out/"\n'
    )
    return spec


def _run(spec: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(BIN / "thresher"), "run", str(spec), *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)


def _output(folder: Path) -> pa.Table:
    return pq.read_table(sorted(folder.glob("part-*.parquet")))


def _ray_args(cluster: Cluster, out: str, pause: float = 0.0) -> list[str]:
    return [
        "--set", 'run.executor="ray"',
        "--set", f'run.address="{cluster.address}"',
        "--set", f'sink.uri="{out}/"',
        "--set", f"model.options.pause={pause}",
    ]  # fmt: skip


def test_ray_output_equals_the_local_executors(cluster: Cluster, job: Path) -> None:
    node = cluster.add_worker_node()
    try:
        local = _run(job, cluster.env, "--set", 'sink.uri="local/"')
        assert local.returncode == 0, local.stderr[-2000:]
        on_ray = _run(job, cluster.env, *_ray_args(cluster, "ray"))
        assert on_ray.returncode == 0, on_ray.stderr[-2000:]
    finally:
        _kill(node)
    expected, got = _output(job.parent / "local"), _output(job.parent / "ray")
    assert got.num_rows == ROWS
    assert got.equals(expected)  # same rows, same order, same predictions
    assert (job.parent / "ray" / "_SUCCESS").exists()


def test_worker_node_killed_mid_job(cluster: Cluster, job: Path) -> None:
    """The worker node dies while its actor holds a shard: the shard is retried on the
    surviving actor (or, failing that, `thresher resume` finishes it); output is exact."""
    node = cluster.add_worker_node()
    store = job.parent / "store.db"
    env = {**cluster.env, "THRESHER_STORE": f"sqlite:///{store}"}
    log = job.parent / "nodes.log"
    cmd = [str(BIN / "thresher"), "run", str(job), *_ray_args(cluster, "out", pause=0.25)]
    cmd += ["--set", f'model.options.log="{log}"']
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Killed only once its actor is busy: a node killed before its actor started costs
        # no attempt (the head's actor would take every shard), and proves nothing.
        _wait_for_a_batch_on(log, WORKER_IP)
        _kill(node)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if proc.returncode != 0:  # the shard ran out of attempts: resume finishes the job
        job_id = _latest_job(store)
        resumed = subprocess.run(
            [str(BIN / "thresher"), "resume", job_id],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr[-2000:] + stderr[-2000:]
    got = _output(job.parent / "out")
    assert sorted(got.column("id").to_pylist()) == list(range(ROWS))  # none lost, none twice
    x = pq.read_table(job.parent / "input.parquet")
    expected = (x.column("x0").to_numpy() * 3.0 - x.column("x1").to_numpy())[got.column("id")]
    np.testing.assert_allclose(got.column("score").to_numpy(), expected)
    with sqlite3.connect(store) as db:
        lost = db.execute(
            "SELECT COUNT(*) FROM thresher_attempts WHERE outcome = 'failed'"
        ).fetchone()[0]
    assert lost >= 1, "the kill should have cost at least one attempt"


def _wait_for_a_batch_on(log: Path, node_ip: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and node_ip in log.read_text().split():
            return
        time.sleep(0.1)
    raise AssertionError(f"no batch ever ran on the node at {node_ip}")


def _latest_job(store: Path) -> str:
    with sqlite3.connect(store) as db:
        row = db.execute("SELECT id FROM thresher_jobs ORDER BY created_at DESC").fetchone()
    return str(row[0])


PICKY_MODEL = """
class Scorer:
    def __init__(self, limit: float, log: str = "") -> None:
        self.limit, self.log = limit, log

    def predict(self, batch):
        if self.log:  # where this ran: a Ray actor has Ray initialised, a local worker not
            import ray

            with open(self.log, "a") as f:
                f.write(f"{ray.is_initialized()}\\n")
        if (batch["x0"] > self.limit).any():
            raise ValueError("x0 out of range")
        return {"score": batch["x0"] * 3.0 - batch["x1"]}
"""


def test_retry_errors_runs_on_the_cluster(cluster: Cluster, job: Path) -> None:
    """retry-errors sends its shards through the job's executor: here, Ray actors."""
    (job.parent / "model.py").write_text(PICKY_MODEL)
    store = job.parent / "store.db"
    env = {**cluster.env, "THRESHER_STORE": f"sqlite:///{store}"}
    first = _run(job, env, *_ray_args(cluster, "out")[:-2], "--set", "model.options.limit=2.5")
    assert first.returncode == 0, first.stderr[-2000:]
    rejected = [json.loads(line) for p in (job.parent / "out" / "_errors").glob("*.jsonl")
                for line in p.read_text().splitlines()]  # fmt: skip
    assert rejected and all(r["stage"] == "predict" for r in rejected)
    log = job.parent / "where.log"
    retry = subprocess.run(
        [str(BIN / "thresher"), "retry-errors", _latest_job(store),
         "--set", "model.options.limit=99", "--set", f'model.options.log="{log}"'],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert retry.returncode == 0, retry.stderr[-2000:]
    assert set(log.read_text().split()) == {"True"}, "the retry ran outside the Ray actors"
    got = _output(job.parent / "out")
    assert sorted(got.column("id").to_pylist()) == list(range(ROWS))
    assert not list((job.parent / "out" / "_errors").glob("*.jsonl")) or all(
        not p.read_text().strip() for p in (job.parent / "out" / "_errors").glob("*.jsonl")
    )
