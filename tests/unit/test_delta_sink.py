"""The Delta sink: one Delta commit per job (append or overwrite) at its end, carrying
its application id, so a publish redone after a crash writes nothing twice."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from thresher.errors import SinkError, SpecError
from thresher.sinks import open_sink
from thresher.sinks.delta import DeltaSink
from thresher.sinks.parts import StagedPart
from thresher.sinks.publish import PendingOutput
from thresher.spec import SinkSection, parse_spec


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


def run_job(root: Path, job_id: str, rows: dict[int, list[int]], mode: str = "merge") -> dict:
    """One job of the sink: shard -> its ids, scored by the job's id (so a reader can
    tell whose row it holds); returns its manifest."""
    made = sink(root, mode, **({"merge_on": "id"} if mode == "merge" else {}))
    made.start(job_id, len(rows), resume=False)
    for shard, ids in rows.items():
        writer = made.part_target().open(shard, "a1")
        score = [float(job_id[-1])] * len(ids)
        writer.write(pa.table({"id": ids, "region": ["eu"] * len(ids), "score": score}))
        made.commit(writer.close(), None)
    manifest: dict[str, object] = {"job_id": job_id, "spec_sha256": "cd" * 32}
    made.finish(manifest)
    return manifest


def scores(root: Path) -> dict[int, float]:
    table = DeltaTable(root).to_pyarrow_table()
    ids, values = table.column("id").to_pylist(), table.column("score").to_pylist()
    assert len(set(ids)) == len(ids), "an id is in the table twice"
    return dict(zip(ids, values, strict=True))


def test_merge_replaces_rescored_ids_and_keeps_the_others(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    first = run_job(root, "20260101-000000-000001", {0: [1, 2, 3], 1: [4, 5]})
    assert first["delta_version"] == 0  # the first merge makes the table
    second = run_job(root, "20260102-000000-000002", {0: [4, 5], 1: [6, 7], 2: []})
    assert scores(root) == {1: 1.0, 2: 1.0, 3: 1.0, 4: 2.0, 5: 2.0, 6: 2.0, 7: 2.0}
    table = DeltaTable(root)
    history = table.history()
    assert [c["thresher.job_id"] for c in history] == [
        "20260102-000000-000002",
        "20260101-000000-000001",
    ]  # one commit per job
    assert history[0]["operation"] == "MERGE"
    assert history[0]["thresher.spec_sha256"] == "cd" * 32
    assert second["delta_version"] == table.version() == 1
    assert table.transaction_version("thresher/20260102-000000-000002/publish") == 1


def test_a_merge_redone_after_its_commit_writes_nothing(tmp_path: Path) -> None:
    """A crash after the merge commit, before the publish finished: the next start on
    the table rolls the publish forward, and the `txn` id keeps it from merging again."""
    root = tmp_path / "scores"
    run_job(root, "20260101-000000-000001", {0: [1, 2]})
    made = sink(root, "merge", merge_on="id")
    made.start("20260102-000000-000002", 1, resume=False)
    writer = made.part_target().open(0, "a1")
    writer.write(pa.table({"id": [2, 3], "region": ["eu", "eu"], "score": [2.0, 2.0]}))
    made.commit(writer.close(), None)
    pending = PendingOutput(made.side_dir, "20260102-000000-000002")
    record = pending.record_intent({"job_id": "20260102-000000-000002"}, False, {"merge_on": "id"})
    made._publish_table("20260102-000000-000002", {**record, "manifest": {}})
    # the parts are gone, as after the commit; put one back, as a crash before their removal
    # leaves it, and a later job (in append mode) rolls the publish forward
    assert len(DeltaTable(root).history()) == 2
    later = sink(root, "append")
    later.start("20260103-000000-000003", 1, resume=False)
    assert len(DeltaTable(root).history()) == 2  # not merged twice
    assert scores(root) == {1: 1.0, 2: 2.0, 3: 2.0}
    assert pending.published()


def test_a_job_whose_rows_repeat_an_id_is_refused_before_it_publishes(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    run_job(root, "20260101-000000-000001", {0: [1, 2]})
    with pytest.raises(SinkError, match="2 rows have id = 7"):
        run_job(root, "20260102-000000-000002", {0: [7, 8], 1: [7]})
    assert scores(root) == {1: 1.0, 2: 1.0}  # the previous version is current
    assert len(DeltaTable(root).history()) == 1


def test_a_retry_round_merges_its_fixed_rows(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    run_job(root, "20260101-000000-000001", {0: [1, 2, 3]})
    retry = sink(root, "merge", merge_on="id")
    retry.start("20260101-000000-000001", 1, resume=True, retry_round=1)
    writer = retry.part_target().open(0, "r1")
    writer.write(pa.table({"id": [3, 9], "region": ["eu", "eu"], "score": [5.0, 5.0]}))
    part = writer.close()
    retry.commit(part, None)
    retry.commit(part, None)  # redone after a crash: the round's txn id says it is in
    retry.finish({"job_id": "20260101-000000-000001"})
    assert scores(root) == {1: 1.0, 2: 1.0, 3: 5.0, 9: 5.0}
    assert len(DeltaTable(root).history()) == 2


SPEC = {
    "source": {"uri": "in.parquet", "id_column": "id"},
    "model": {"kind": "python", "uri": "m.py:M"},
    "sink": {"uri": "out/scores", "format": "delta", "mode": "merge"},
}


def test_merge_needs_an_id_column() -> None:
    no_id = {**SPEC, "source": {"uri": "in.parquet"}}
    with pytest.raises(SpecError) as raised:
        parse_spec(no_id)
    assert any(p.startswith("source.id_column:") for p in raised.value.problems)
    assert parse_spec(SPEC).sink.options == {"merge_on": "id"}


def test_a_sink_that_cannot_merge_is_a_spec_error_naming_sink_mode(tmp_path: Path) -> None:
    parquet = {**SPEC, "sink": {"uri": "out/", "mode": "merge"}}
    with pytest.raises(SpecError) as raised:
        parse_spec(parquet)
    assert any(p.startswith("sink.mode:") and "parquet" in p for p in raised.value.problems)
    bad_key = {**SPEC, "sink": {**SPEC["sink"], "options": {"merge_on": "nope"}}}
    with pytest.raises(SpecError, match=r"sink\.options\.merge_on"):
        parse_spec(bad_key)
