"""The Delta sink: one Delta commit per job (append or overwrite) at its end, carrying
its application id, so a publish redone after a crash writes nothing twice."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from thresher.errors import SinkError
from thresher.sinks import open_sink
from thresher.sinks.delta import DeltaSink
from thresher.sinks.parts import StagedPart
from thresher.spec import SinkSection


def sink(root: Path, mode: str = "append", **options: object) -> DeltaSink:
    section = SinkSection(uri=str(root), format="delta", mode=mode, options=options)
    made = open_sink(section)
    assert isinstance(made, DeltaSink)
    return made


def stage(made: DeltaSink, shard: int, attempt: str) -> StagedPart:
    writer = made.part_target().open(shard, attempt)
    ids = [shard * 10 + i for i in range(3)]
    writer.write(pa.table({"id": ids, "region": ["eu", "us", "eu"], "score": [0.5] * 3}))
    return writer.close()


def test_append_commits_the_job_once_even_when_shards_are_redone(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    first = sink(root)
    first.start("20260101-000000-000001", 3, resume=False)
    for shard in range(3):
        part = stage(first, shard, "a1")
        first.commit(part, None)
        first.commit(part, None)  # redone after a crash between commit and bookkeeping
    first.abort()  # stopped: nothing is in the table before the job's end
    assert not DeltaTable.is_deltatable(str(root))
    # a resumed job redoes shard 1 (its commit was not recorded): the table has it already
    again = sink(root)
    again.start("20260101-000000-000001", 3, resume=True)
    again.commit(stage(again, 1, "a2"), None)
    manifest: dict[str, object] = {"job_id": "20260101-000000-000001"}
    again.finish(manifest)
    table = DeltaTable(root)
    ids = sorted(table.to_pyarrow_table().column("id").to_pylist())
    assert ids == sorted(s * 10 + i for s in range(3) for i in range(3))
    (commit,) = table.history()  # one commit for the job, at its end
    assert commit["thresher.job_id"] == "20260101-000000-000001"
    assert table.transaction_version("thresher/20260101-000000-000001/publish") is not None
    assert manifest["delta_version"] == table.version() == 0
    success = json.loads((root / "_thresher" / "_SUCCESS").read_text())
    assert success["delta_version"] == 0


def test_overwrite_is_one_commit_with_the_jobs_identity(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    made = sink(root, "overwrite", partition_by=["region"])
    made.start("20260101-000000-000001", 2, resume=False)
    for shard in range(2):
        made.commit(stage(made, shard, "a1"), None)
    assert not DeltaTable.is_deltatable(str(root))  # nothing visible before finish
    manifest: dict[str, object] = {
        "job_id": "20260101-000000-000001",
        "model": {"sha256": "ab" * 32},
        "spec_sha256": "cd" * 32,
        "rows_out": 6,
    }
    made.finish(manifest)
    table = DeltaTable(root)
    (commit,) = table.history()
    assert commit["thresher.job_id"] == "20260101-000000-000001"
    assert commit["thresher.model_sha256"] == "ab" * 32
    assert commit["thresher.spec_sha256"] == "cd" * 32
    assert table.metadata().partition_columns == ["region"]
    assert table.to_pyarrow_table().num_rows == 6
    assert manifest["delta_version"] == 0
    assert not list((root / "_thresher").rglob("*.parquet"))  # no part left behind


def test_a_table_thresher_did_not_write_is_refused(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    root = tmp_path / "theirs"
    write_deltalake(str(root), pa.table({"id": [1]}))
    with pytest.raises(SinkError, match="thresher did not write"):
        sink(root, "overwrite").start("20260101-000000-000001", 1, resume=False)
    forced = SinkSection(uri=str(root), format="delta", force=True)
    open_sink(forced).start("20260101-000000-000001", 1, resume=False)


def test_a_misspelt_option_is_a_spec_error() -> None:
    with pytest.raises(ValueError, match="partition_bi"):
        SinkSection(uri="out/t", format="delta", options={"partition_bi": ["x"]})
