"""A service's job starts its workers' zygote warm: the server's fork server imported the
registered models' libraries (torch here) once, and each job process forks the zygote
from itself instead of spawning a fresh interpreter that imports them again."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROWS = 100

# Where the model is built: its process, that process's parent (the job process) and the
# job process's parent (the fork server), and how the builder was started.
NETS = """
import os

import torch
from torch import nn


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


class Built(nn.Module):
    def __init__(self, log):
        super().__init__()
        self.net = nn.Linear(1, 1)
        with open("/proc/self/cmdline", "rb") as f:
            started = "spawned" if b"spawn_main" in f.read() else "forked"
        job = os.getppid()
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {job} {parent_of(job)} {started}\\n")

    def forward(self, x):
        return self.net(x)
"""


def test_a_jobs_zygote_is_forked_with_the_registered_models_libraries_loaded(
    tmp_path: Path,
) -> None:
    import torch
    from safetensors.torch import save_file

    site = ServiceSite(tmp_path)
    nets = tmp_path / "warm_nets.py"  # a name no other test's module has taken
    nets.write_text(NETS)
    loaded = importlib.util.spec_from_file_location("warm_nets", nets)
    assert loaded is not None and loaded.loader is not None
    source = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(source)
    Built = source.Built
    module = Built(str(tmp_path / "unused")).eval()
    save_file(module.state_dict(), str(tmp_path / "weights.safetensors"))
    log = tmp_path / "built.log"
    uri = json.dumps(f"{nets}:Built")
    options = {"log": str(log), "weights": str(tmp_path / "weights.safetensors"), "device": "cpu"}
    table = ", ".join(f"{key} = {json.dumps(value)}" for key, value in options.items())
    with site.config.open("a") as config:
        config.write(f'\n[models.built]\nkind = "torch"\nuri = {uri}\noptions = {{ {table} }}\n')
    for half in range(2):  # two files, two shards: a worker process, not the job's thread
        rows = range(half * ROWS // 2, (half + 1) * ROWS // 2)
        table = pa.table({"id": list(rows), "x": [float(i) for i in rows]})
        pq.write_table(table, site.shared / f"part-{half}.parquet")
    token = site.token("acme")
    server = Server(site)
    try:
        with server.client(token) as client:
            body = {
                "source": {"uri": str(site.shared), "format": "parquet"},
                "model": "built",
                "id_column": "id",
            }
            submitted = client.post("/v1/jobs", json=body)
            assert submitted.status_code == 201, submitted.text
            job_id = submitted.json()["id"]
            job = wait_for_job(client, job_id, timeout=120)
            assert job["status"] == "succeeded", job
            zygote, job_process, fork_server, started = log.read_text().split()
            fork_server_maps = Path(f"/proc/{fork_server}/maps").read_text()
            results = client.get(f"/v1/jobs/{job_id}/results").content
    finally:
        server.stop()
    assert started == "forked", "the zygote was spawned: it imported torch again"
    assert zygote != job_process != fork_server
    assert "libtorch" in fork_server_maps, "the fork server did not import the model's libraries"
    rows = [json.loads(line) for line in results.splitlines()]
    assert len(rows) == ROWS, results[:500]
    with torch.inference_mode():
        expected = module(torch.arange(ROWS, dtype=torch.float32).reshape(-1, 1)).numpy().ravel()
    got = np.array([row["prediction"] for row in sorted(rows, key=lambda r: r["id"])])
    np.testing.assert_allclose(got, expected, rtol=1e-5)
