"""The coordinator's loop, driven in this process: the in-process executor and the memory
sink from `thresher.testing`, a real Parquet input and a real job store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import thresher
from thresher.store import ShardState, open_store
from thresher.testing import MemorySink

ROWS = 20_000

MODEL = """
class Doubler:
    def predict(self, batch):
        if (batch["x"] < 0).any():
            raise ValueError("negative")
        return {"double": batch["x"] * 2.0}
"""


def spec(tmp_path: Path, uri: str) -> dict[str, dict[str, object]]:
    x = np.arange(ROWS) * 0.5 - 0.25  # the first row is negative: the model rejects it
    pq.write_table(
        pa.table({"id": np.arange(ROWS), "x": x}), tmp_path / "in.parquet", row_group_size=2_000
    )
    (tmp_path / "doubler.py").write_text(MODEL)
    return {
        "source": {"uri": str(tmp_path / "in.parquet"), "id_column": "id", "shard_bytes": 4096},
        "model": {
            "kind": "python",
            "uri": f"{tmp_path / 'doubler.py'}:Doubler",
            "batch_format": "numpy",
        },
        "batch": {"size": 1000},
        "run": {"executor": "thresher.testing:in_process_executor"},
        "sink": {"uri": uri, "format": "thresher.testing:memory_sink"},
    }


def test_the_loop_commits_every_shard_once_in_process(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    result = thresher.run(spec(tmp_path, "memory://loop"), store=store)
    assert result.succeeded, result.problems
    assert (result.manifest["rows_in"], result.manifest["rows_out"]) == (ROWS, ROWS - 1)
    assert result.manifest["rows_error"] == 1
    out = pa.concat_tables(MemorySink("memory://loop").read_output())
    assert out.column("id").to_pylist() == list(range(1, ROWS))  # in input order
    np.testing.assert_allclose(
        out.column("double").to_numpy(), (np.arange(1, ROWS) * 0.5 - 0.25) * 2
    )
    shards = open_store(store).shards(result.job_id)
    assert len(shards) > 1 and all(s.state == ShardState.DONE for s in shards)
    assert all(s.attempts == 1 for s in shards)
