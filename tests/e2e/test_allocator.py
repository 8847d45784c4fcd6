"""The `thresher` command gives its own process and every worker Arrow's jemalloc pool
(thresher/cli/allocator.py), unless the user named a pool in ARROW_DEFAULT_MEMORY_POOL."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .support import THRESHER, store_env

pytestmark = pytest.mark.e2e

# Each process that loads the model notes its pid and the pool its Arrow buffers come from.
MODEL = """
import os

import pyarrow as pa


class Pools:
    def __init__(self, note):
        self.note = note

    def setup(self):
        with open(self.note, "a") as f:
            f.write(f"{os.getpid()} {pa.default_memory_pool().backend_name}\\n")

    def predict(self, batch):
        return {"y": batch["x"] * 2.0}
"""


def pools_of_a_run(root: Path, shards: int, chosen: str | None) -> set[str]:
    rows = 4000
    pq.write_table(pa.table({"id": np.arange(rows), "x": np.ones(rows)}), root / "in.parquet")
    (root / "model.py").write_text(MODEL)
    (root / "job.toml").write_text(
        f'[source]\nuri = "in.parquet"\nid_column = "id"\nshard_rows = {rows // shards}\n'
        '[model]\nkind = "python"\nuri = "model.py:Pools"\nbatch_format = "numpy"\n'
        f'options = {{ note = "{root / "pools"}" }}\n'
        f'[run]\nworkers = {shards}\n[sink]\nuri = "out/"\n'
    )
    env = store_env(root)
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    if chosen:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    done = subprocess.run(
        [str(THRESHER), "run", "job.toml"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    noted = dict(line.split() for line in (root / "pools").read_text().splitlines())
    return set(noted.values())


@pytest.mark.parametrize("shards", [1, 2])
def test_the_command_and_its_workers_use_jemalloc(tmp_path: Path, shards: int) -> None:
    assert pools_of_a_run(tmp_path, shards, None) == {"jemalloc"}


def test_a_pool_the_user_named_stands(tmp_path: Path) -> None:
    assert pools_of_a_run(tmp_path, 2, "system") == {"system"}
