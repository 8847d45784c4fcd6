"""The Iceberg sink: one snapshot per job (append or overwrite) at its end, its summary
naming the commit, so a publish or a retried shard redone after a crash writes nothing
twice; a new table made in that same commit."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from iceberg_lake import lake
from thresher.errors import SinkError, SpecError
from thresher.sinks import open_sink
from thresher.sinks.iceberg import IcebergSink
from thresher.sinks.parts import StagedPart
from thresher.sources.iceberg_catalog import open_catalog
from thresher.spec import SinkSection

JOB = "20260101-000000-000001"


def sink(props: dict[str, Any], mode: str = "append", uri: str = "db.scores", **more: Any) -> Any:
    options = {"catalog": props, **more.pop("options", {})}
    section = SinkSection(uri=uri, format="iceberg", mode=mode, options=options, **more)
    made = open_sink(section)
    assert isinstance(made, IcebergSink)
    return made


def stage(made: IcebergSink, shard: int, attempt: str, **columns: list[Any]) -> StagedPart:
    writer = made.part_target().open(shard, attempt)
    ids = [shard * 10 + i for i in range(3)]
    rows = {"id": ids, "region": ["eu", "us", "eu"], "score": [0.5] * 3, **columns}
    writer.write(pa.table(rows))
    return writer.close()


def publish(made: IcebergSink, shards: int = 2, job: str = JOB, **columns: list[Any]) -> dict:
    made.start(job, shards, resume=False)
    for shard in range(shards):
        made.commit(stage(made, shard, "a1", **columns), None)
    manifest: dict[str, Any] = {"job_id": job, "model": {"sha256": "ab" * 32}, "rows_out": 6}
    made.finish(manifest)
    return manifest


def test_append_commits_the_job_once_even_when_shards_are_redone(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    first = sink(props)
    first.start(JOB, 3, resume=False)
    for shard in range(3):
        part = stage(first, shard, "a1")
        first.commit(part, None)
        first.commit(part, None)  # redone after a crash between commit and bookkeeping
    first.abort()  # stopped: nothing is in the catalog before the job's end
    assert not catalog.table_exists("db.scores")
    # a resumed job redoes shard 1 (its commit was not recorded): once in the table still
    again = sink(props)
    again.start(JOB, 3, resume=True)
    again.commit(stage(again, 1, "a2"), None)
    manifest: dict[str, Any] = {"job_id": JOB}
    again.finish(manifest)
    table = catalog.load_table("db.scores")
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    assert ids == sorted(s * 10 + i for s in range(3) for i in range(3))
    (snapshot,) = table.snapshots()  # one snapshot for the job, at its end
    assert snapshot.summary["thresher.job_id"] == JOB
    assert snapshot.summary["thresher.commit"] == f"thresher/{JOB}/publish"
    assert manifest["iceberg_snapshot_id"] == snapshot.snapshot_id
    success = json.loads(Path(again.side_dir, "_SUCCESS").read_text())
    assert success["iceberg_snapshot_id"] == snapshot.snapshot_id
    assert Path(again.side_dir).parent == Path(table.location())  # the side folder is in it


def test_overwrite_is_one_snapshot_with_the_jobs_identity(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    publish(sink(props, "overwrite", options={"partition_by": ["region"]}))
    later = "20260102-000000-000002"
    made = sink(props, "overwrite", options={"partition_by": ["region"]})
    manifest = publish(made, job=later)
    table = catalog.load_table("db.scores")
    first, second = table.snapshots()
    assert second.summary.operation.value == "overwrite"  # one snapshot: delete and add
    assert second.summary["thresher.job_id"] == later
    assert second.summary["thresher.model_sha256"] == "ab" * 32
    assert [f.name for f in table.spec().fields] == ["region"]
    assert table.scan().to_arrow().num_rows == 6
    assert table.scan(snapshot_id=first.snapshot_id).to_arrow().num_rows == 6
    assert manifest["iceberg_snapshot_id"] == second.snapshot_id
    assert not list(Path(made.side_dir).rglob("*.parquet"))  # no part left behind


def test_overwrite_takes_the_rows_schema_and_append_keeps_the_tables(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    publish(sink(props, "overwrite"))
    publish(sink(props, "overwrite"), job="20260102-000000-000002", label=["x"] * 3)
    table = catalog.load_table("db.scores")
    assert table.schema().column_names == ["id", "region", "score", "label"]
    before = table.current_snapshot().snapshot_id
    with pytest.raises(SinkError, match=re.escape("do not fit the table's columns")):
        publish(sink(props), job="20260103-000000-000003", other=[1] * 3)
    table = catalog.load_table("db.scores")
    assert table.current_snapshot().snapshot_id == before  # the failed job changed nothing


def test_a_retry_round_appends_each_shard_once(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    publish(sink(props))
    retry = sink(props)
    retry.start(JOB, 2, resume=True, retry_round=1)
    part = stage(retry, 1, "r1")
    retry.commit(part, None)
    retry.commit(part, None)  # redone
    manifest: dict[str, Any] = {"job_id": JOB}
    retry.finish(manifest)
    table = catalog.load_table("db.scores")
    assert table.scan().to_arrow().num_rows == 9
    newest = table.current_snapshot()
    assert newest.summary["thresher.commit"] == f"thresher/{JOB}.r1/1"
    assert manifest["iceberg_snapshot_id"] == newest.snapshot_id


def test_a_table_thresher_did_not_write_is_refused(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    catalog.create_table("db.theirs", schema=pa.schema([("id", pa.int64())]))
    with pytest.raises(SinkError, match=re.escape("thresher did not write it")):
        sink(props, "overwrite", uri="db.theirs").start(JOB, 1, resume=False)
    forced = sink(props, "overwrite", uri="db.theirs", force=True)
    forced.start(JOB, 1, resume=False)


def test_wrong_namespace_partitions_and_options_are_spec_errors(tmp_path: Path) -> None:
    props, _ = lake(tmp_path)
    with pytest.raises(SpecError, match=re.escape("sink.uri: no namespace nowhere")):
        sink(props, uri="nowhere.scores").start(JOB, 1, resume=False)
    with pytest.raises(SpecError, match=re.escape("namespace.table")):
        sink(props, uri="scores")
    publish(sink(props))
    with pytest.raises(SpecError, match=re.escape("sink.options.partition_by: table db.scores is")):
        sink(props, options={"partition_by": ["region"]}).start("2", 1, resume=False)
    with pytest.raises(ValueError, match=re.escape("partition_bi")):
        SinkSection(uri="db.t", format="iceberg", options={"partition_bi": ["x"]})


def test_a_new_table_goes_where_the_catalog_would_stage_it(tmp_path: Path) -> None:
    """The sink places a new table by the catalog's own rule without staging it: under
    the warehouse, or under its namespace's `location`, as pyiceberg would; a nested
    namespace, where pyiceberg makes no new table, is a spec error before any work."""
    from pyiceberg.schema import Schema

    props, _ = lake(tmp_path)
    catalog = open_catalog(props, "catalog")
    catalog.create_namespace("placed", {"location": str(tmp_path / "elsewhere")})
    for uri in ("db.scores", "placed.scores"):
        staged = catalog.create_table_transaction(uri, schema=Schema()).table_metadata
        assert sink(props, uri=uri).location == staged.location.rstrip("/")
    assert sink(props, uri="placed.scores").location == str(tmp_path / "elsewhere" / "scores")
    catalog.create_namespace(("db", "inner"))
    with pytest.raises(SpecError, match=re.escape("sink.uri: a new Iceberg table goes in a")):
        sink(props, uri="db.inner.scores").start(JOB, 1, resume=False)


def test_a_partition_column_the_output_lacks_fails_the_publish(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    with pytest.raises(SinkError, match=re.escape("sink.options.partition_by: colour is not")):
        publish(sink(props, options={"partition_by": ["colour"]}))
    assert not catalog.table_exists("db.scores")  # no table without its rows


def test_a_publish_cut_short_after_its_commit_is_not_committed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot landed, then the process died before the parts were cleared: the next
    start on the table rolls the publish forward and finds the snapshot by its name."""
    import thresher.sinks.publish as publish_module

    props, catalog = lake(tmp_path)

    def died(*_: object) -> None:
        raise KeyboardInterrupt("killed")

    with monkeypatch.context() as patched:
        patched.setattr(publish_module, "finish_publish", died)
        with pytest.raises(KeyboardInterrupt):
            publish(sink(props))
    assert len(catalog.load_table("db.scores").snapshots()) == 1
    publish(sink(props), job="20260102-000000-000002")  # its start recovers the first
    table = catalog.load_table("db.scores")
    assert [s.summary["thresher.job_id"] for s in table.snapshots()] == [
        JOB,
        "20260102-000000-000002",
    ]
    assert table.scan().to_arrow().num_rows == 12


def test_a_retried_shard_committed_before_a_crash_is_not_appended_again(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    publish(sink(props))
    retry = sink(props)
    retry.start(JOB, 2, resume=True, retry_round=1)
    part = stage(retry, 1, "r1")
    assert part.path is not None
    kept = Path(part.path).read_bytes()
    retry.commit(part, None)
    Path(part.path).write_bytes(kept)  # as if the crash came before the part was removed
    retry.commit(part, None)
    assert catalog.load_table("db.scores").scan().to_arrow().num_rows == 9


def test_thresher_run_writes_data_in_memory_to_an_iceberg_table(tmp_path: Path) -> None:
    """The Python API's in-memory job takes an iceberg sink section; the result reads the
    table back through the sink."""
    import numpy as np
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    import thresher

    props, catalog = lake(tmp_path)
    rng = np.random.default_rng(0)
    data = pd.DataFrame(rng.normal(size=(2_000, 3)), columns=["a", "b", "c"])
    model = LogisticRegression().fit(data, (data.a > 0).astype(int))
    sink_section = {"uri": "db.scores", "format": "iceberg", "options": {"catalog": props}}
    result = thresher.run(data=data, model=model, sink=sink_section, workers=2, progress=False)
    out = result.to_pandas().sort_values("_row")
    assert np.array_equal(out["prediction"].to_numpy(), model.predict(data))
    table = catalog.load_table("db.scores")
    (snapshot,) = table.snapshots()
    assert snapshot.snapshot_id == result.manifest["iceberg_snapshot_id"]
    assert table.scan().to_arrow().num_rows == 2_000


def test_a_job_without_rows_makes_no_table_but_a_snapshot_of_an_existing_one(
    tmp_path: Path,
) -> None:
    props, catalog = lake(tmp_path)
    empty = sink(props)
    empty.start(JOB, 1, resume=False)
    manifest: dict[str, Any] = {"job_id": JOB}
    empty.finish(manifest)
    assert not catalog.table_exists("db.scores") and manifest["iceberg_snapshot_id"] is None
    publish(sink(props), job="20260102-000000-000002")
    later = "20260103-000000-000003"
    for mode, rows in (("append", 6), ("overwrite", 0)):
        made = sink(props, mode)
        made.start(later, 1, resume=False)
        manifest = {"job_id": later}
        made.finish(manifest)
        table = catalog.load_table("db.scores")
        assert manifest["iceberg_snapshot_id"] == table.current_snapshot().snapshot_id
        assert table.scan().to_arrow().num_rows == rows
        later = "20260104-000000-000004"
