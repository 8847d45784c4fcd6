"""A server whose jobs run on a local Ray keeps one Ray for all of them: started with the
server, joined by each job's coordinator (no job starts or stops a Ray of its own), and
gone with the server, even one killed with SIGKILL. Its actors stay warm between jobs:
the second job of a model runs on the actor that loaded it for the first."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROWS = 400

# Says which process built it, and which ran each batch.
COUNTED = """
import os

import numpy as np


class Counted:
    def __init__(self, log):
        self.log = log
        with open(log, "a") as f:
            f.write(f"built {os.getpid()}\\n")

    def predict(self, batch):
        with open(self.log, "a") as f:
            f.write(f"ran {os.getpid()}\\n")
        return {"prediction": 2.0 * np.asarray(batch["x"], dtype=float)}
"""


def ray_processes(name: str) -> set[int]:
    """Pids of running processes called `name` (Ray's `gcs_server`, `raylet`)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rpartition(")")[2].split()[1])
    return False


def under(ancestor: int, pids: set[int]) -> set[int]:
    return {pid for pid in pids if descends_from(pid, ancestor)}


def test_the_servers_jobs_join_one_ray_that_dies_with_the_server(tmp_path: Path) -> None:
    site = ServiceSite(tmp_path, settings="")
    config = site.config.read_text().replace(
        "[run]\nworkers = 1", '[run]\nworkers = 1\nexecutor = "ray"'
    )
    log = tmp_path / "counted.log"
    (tmp_path / "counted.py").write_text(COUNTED)
    config += (
        f'\n[models.counted]\nkind = "python"\nuri = "{tmp_path / "counted.py"}:Counted"\n'
        f'batch_format = "numpy"\noptions = {{ log = "{log}" }}\n'
    )
    site.config.write_text(config)
    for half in range(2):  # two files, two shards: the Ray executor, not the job's thread
        rows = range(half * ROWS // 2, (half + 1) * ROWS // 2)
        table = pa.table({"id": list(rows), "x": [float(i) for i in rows]})
        pq.write_table(table, site.shared / f"part-{half}.parquet")
    token = site.token("acme")
    server = Server(site, env={"RAY_USAGE_STATS_ENABLED": "0"}, timeout=120)
    try:
        clusters = under(server.process.pid, ray_processes("gcs_server"))
        assert len(clusters) == 1, "the server did not start its Ray"
        with server.client(token) as client:
            source = {"uri": str(site.shared), "format": "parquet"}
            # Two jobs of one model, then one of another: warm actors hold no CPU that
            # the other model's actors would wait for.
            for model in ("counted", "counted", "double"):
                body = {"source": source, "model": model, "id_column": "id", "workers": 2}
                submitted = client.post("/v1/jobs", json=body)
                assert submitted.status_code == 201, submitted.text
                job = wait_for_job(client, submitted.json()["id"], timeout=120)
                assert job["status"] == "succeeded", job
                results = client.get(job["results_url"]).content.splitlines()
                rows = sorted((r["id"], r["prediction"]) for r in map(json.loads, results))
                assert rows == [(i, 2.0 * i) for i in range(ROWS)]
                # No job started a Ray of its own: the server's is the only one under it
                # (other tests, in other xdist workers, may start theirs meanwhile).
                assert under(server.process.pid, ray_processes("gcs_server")) == clusters
    finally:
        server.kill()
    deadline = time.monotonic() + 30
    while ray_processes("gcs_server") & clusters and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ray_processes("gcs_server") & clusters, "the server's Ray outlived it"
    said = server.log.read_text()
    address = said.split("Ray for this server's jobs: ")[1].split(",")[0]
    assert said.count(f"job on Ray at {address}") == 3, said
    assert "a Ray of its own" not in said
    lines = [line.split() for line in log.read_text().splitlines()]
    built = [pid for what, pid in lines if what == "built"]
    ran = {pid for what, pid in lines if what == "ran"}
    # Each of the two slots loaded it once, for both jobs (on a busy machine one actor
    # may be up before the other and run every batch).
    assert len(built) == 2, f"two actors loaded the model {len(built)} times for two jobs"
    assert ran <= set(built)
