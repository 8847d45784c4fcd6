"""The Iceberg sink's merge (`sink.mode = "merge"`): rows whose id the table holds
replace those rows, others are added, in one commit a job (a delete and an append
snapshot, both named by the commit); a merge redone after its commit writes nothing, a
job whose rows repeat an id is refused before it publishes, a retry round merges, and a
partitioned table merges too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from iceberg_lake import lake
from thresher.errors import SinkError, SpecError
from thresher.sinks import open_sink
from thresher.sinks.iceberg import IcebergSink
from thresher.sinks.publish import PendingOutput
from thresher.spec import SinkSection, parse_spec


def sink(props: dict[str, Any], mode: str = "merge", **options: Any) -> IcebergSink:
    merge = {"merge_on": "id"} if mode == "merge" else {}
    section = SinkSection(
        uri="db.scores", format="iceberg", mode=mode, options={"catalog": props, **merge, **options}
    )
    made = open_sink(section)
    assert isinstance(made, IcebergSink)
    return made


def run_job(
    props: dict[str, Any], job_id: str, rows: dict[int, list[int]], **options: Any
) -> dict[str, Any]:
    """One merge job: shard -> its ids, scored by the job's last digit (so a reader can
    tell whose row it holds); returns its manifest."""
    made = sink(props, **options)
    made.start(job_id, len(rows), resume=False)
    for shard, ids in rows.items():
        writer = made.part_target().open(shard, "a1")
        score = [float(job_id[-1])] * len(ids)
        regions = ["eu" if i % 2 else "us" for i in ids]
        writer.write(pa.table({"id": ids, "region": regions, "score": score}))
        made.commit(writer.close(), None)
    manifest: dict[str, Any] = {"job_id": job_id, "spec_sha256": "cd" * 32}
    made.finish(manifest)
    return manifest


def scores(catalog: Any) -> dict[int, float]:
    table = catalog.load_table("db.scores").scan().to_arrow()
    ids, values = table.column("id").to_pylist(), table.column("score").to_pylist()
    assert len(set(ids)) == len(ids), "an id is in the table twice"
    return dict(zip(ids, values, strict=True))


def jobs_of(catalog: Any) -> list[str]:
    """The job of each commit, oldest first (a merge's delete and append: one commit)."""
    summaries = [s.summary for s in catalog.load_table("db.scores").snapshots()]
    commits = dict.fromkeys(s["thresher.commit"] for s in summaries)
    return [c.split("/")[1] for c in commits]


@pytest.mark.parametrize("partition_by", [[], ["region"]])
def test_merge_replaces_rescored_ids_and_keeps_the_others(
    tmp_path: Path, partition_by: list[str]
) -> None:
    props, catalog = lake(tmp_path)
    first = "20260101-000000-000001"
    run_job(props, first, {0: [1, 2, 3], 1: [4, 5]}, partition_by=partition_by)
    second = "20260102-000000-000002"
    manifest = run_job(props, second, {0: [4, 5], 1: [6, 7], 2: []}, partition_by=partition_by)
    assert scores(catalog) == {1: 1.0, 2: 1.0, 3: 1.0, 4: 2.0, 5: 2.0, 6: 2.0, 7: 2.0}
    assert jobs_of(catalog) == [first, second]  # one commit a job
    table = catalog.load_table("db.scores")
    current = table.current_snapshot()
    assert manifest["iceberg_snapshot_id"] == current.snapshot_id
    assert current.summary["thresher.spec_sha256"] == "cd" * 32
    # the rows before the second job's merge are there to time travel to
    before = table.scan(snapshot_id=table.snapshots()[0].snapshot_id).to_arrow()
    assert sorted(before.column("id").to_pylist()) == [1, 2, 3, 4, 5]


def test_a_merge_redone_after_its_commit_writes_nothing(tmp_path: Path) -> None:
    """A crash after the merge's commit, before the publish finished: the next start on
    the table rolls the publish forward, and the commit's name keeps it from merging
    again."""
    props, catalog = lake(tmp_path)
    run_job(props, "20260101-000000-000001", {0: [1, 2]})
    made = sink(props)
    job = "20260102-000000-000002"
    made.start(job, 1, resume=False)
    writer = made.part_target().open(0, "a1")
    writer.write(pa.table({"id": [2, 3], "region": ["eu", "eu"], "score": [2.0, 2.0]}))
    made.commit(writer.close(), None)
    pending = PendingOutput(made.side_dir, job)
    record = pending.record_intent({"job_id": job}, False, {"merge_on": "id"})
    made._publish_table(job, {**record, "manifest": {}})
    snapshots = len(catalog.load_table("db.scores").snapshots())
    made._publish_table(job, {**record, "manifest": {}})  # redone: found, nothing written
    later = sink(props, "append")  # a later job's start rolls the publish forward
    later.start("20260103-000000-000003", 1, resume=False)
    assert len(catalog.load_table("db.scores").snapshots()) == snapshots
    assert scores(catalog) == {1: 1.0, 2: 2.0, 3: 2.0}
    assert pending.published()


def test_a_job_whose_rows_repeat_an_id_is_refused_before_it_publishes(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    run_job(props, "20260101-000000-000001", {0: [1, 2]})
    with pytest.raises(SinkError, match="2 rows have id = 7"):
        run_job(props, "20260102-000000-000002", {0: [7, 8], 1: [7]})
    assert scores(catalog) == {1: 1.0, 2: 1.0}  # the previous snapshot is current
    assert jobs_of(catalog) == ["20260101-000000-000001"]


def test_a_retry_round_merges_its_fixed_rows(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    job = "20260101-000000-000001"
    run_job(props, job, {0: [1, 2, 3]})
    retry = sink(props)
    retry.start(job, 1, resume=True, retry_round=1)
    writer = retry.part_target().open(0, "r1")
    writer.write(pa.table({"id": [3, 9], "region": ["eu", "eu"], "score": [5.0, 5.0]}))
    part = writer.close()
    retry.commit(part, None)
    retry.commit(part, None)  # redone after a crash: the round's commit is found
    retry.finish({"job_id": job})
    assert scores(catalog) == {1: 1.0, 2: 1.0, 3: 5.0, 9: 5.0}


def test_a_merge_spec_takes_the_id_column_and_needs_one() -> None:
    spec = {
        "source": {"uri": "in.parquet", "id_column": "id"},
        "model": {"kind": "python", "uri": "m.py:M"},
        "sink": {"uri": "db.scores", "format": "iceberg", "mode": "merge"},
    }
    assert parse_spec(spec).sink.options["merge_on"] == "id"
    with pytest.raises(SpecError, match=r"source\.id_column"):
        parse_spec({**spec, "source": {"uri": "in.parquet"}})


def test_a_job_with_a_row_of_no_id_is_refused_before_it_publishes(tmp_path: Path) -> None:
    """A row with no id could never be matched again: each merge would add it anew."""
    props, catalog = lake(tmp_path)
    run_job(props, "20260101-000000-000001", {0: [1, 2]})
    made = sink(props)
    made.start("20260102-000000-000002", 1, resume=False)
    writer = made.part_target().open(0, "a1")
    ids = pa.array([3, None], pa.int64())
    writer.write(pa.table({"id": ids, "region": ["eu", "eu"], "score": [2.0, 2.0]}))
    made.commit(writer.close(), None)
    with pytest.raises(SinkError, match="1 row\\(s\\) have no id"):
        made.finish({"job_id": "20260102-000000-000002"})
    assert scores(catalog) == {1: 1.0, 2: 1.0}


def test_a_merge_of_many_ids_reads_no_file_outside_their_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past 200 ids pyiceberg's file statistics judge any file as holding one; the ids'
    range still keeps a file of other ids from being read (or rewritten)."""
    from pyiceberg.io import pyarrow as iceberg_arrow

    props, catalog = lake(tmp_path)
    run_job(props, "20260101-000000-000001", {0: list(range(300))})
    run_job(props, "20260102-000000-000002", {0: list(range(1_000, 1_300))})

    def live() -> set[str]:
        return {task.file.file_path for task in catalog.load_table("db.scores").scan().plan_files()}

    read: list[str] = []
    to_table = iceberg_arrow.ArrowScan.to_table

    def reading(scan: Any, tasks: Any) -> Any:
        tasks = list(tasks)
        read.extend(task.file.file_path for task in tasks)
        return to_table(scan, tasks)

    monkeypatch.setattr(iceberg_arrow.ArrowScan, "to_table", reading)
    before = live()
    run_job(props, "20260103-000000-000003", {0: list(range(250))})
    after = live()
    kept = before & after
    assert len(kept) == 1 and not kept & set(read)  # ids 1000..1299's file: not even read
    assert len(read) == 1  # ids 0..299's file: read, and rewritten without ids 0..249
    got = scores(catalog)
    assert {got[i] for i in range(250)} == {3.0} and {got[i] for i in range(250, 300)} == {1.0}
    assert {got[i] for i in range(1_000, 1_300)} == {2.0}
