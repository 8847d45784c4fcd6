"""Actuals joined to a job's predictions by id: exactly (ids of the job's own type),
idempotently (the same part twice changes nothing; an id keeps its first label), with
unknown and repeated ids counted, and errors that name the file, line or row, and field."""

from __future__ import annotations

import gzip
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thresher.errors import MonitorError
from thresher.monitor.actuals import add_actuals
from thresher.monitor.labels import from_records, read_file, read_query
from thresher.store import Store

FinishedJob = Callable[..., str]


def scores(rows: int = 10) -> pa.Table:
    """Ids 1..rows, an integer class and its probabilities."""
    p1 = [(i % 10) / 10 + 0.05 for i in range(rows)]
    return pa.table(
        {
            "id": pa.array(range(1, rows + 1), pa.int64()),
            "prediction": pa.array([int(p > 0.5) for p in p1], pa.int64()),
            "proba_0": pa.array([1 - p for p in p1]),
            "proba_1": pa.array(p1),
        }
    )


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_part_joins_by_id_and_counts_unknown_and_repeated_ids(
    store: Store, tmp_path: Path, finished_job: FinishedJob
) -> None:
    job = finished_job(scores(10))
    labels = write(tmp_path / "a.csv", "id,label\n1,0\n2,1\n2,0\n99,1\n3,1\n98,0\n")
    added = add_actuals(store, job, read_file(labels, "id", "label"))
    assert (added.new, added.rows_read, added.matched) == (True, 6, 3)
    assert (added.unknown, added.repeated) == (2, 1)
    assert added.unknown_ids == ("99", "98")
    assert (added.labelled, added.predicted, added.coverage) == (3, 10, 0.3)


def test_the_same_part_twice_changes_nothing(
    store: Store, tmp_path: Path, finished_job: FinishedJob
) -> None:
    job = finished_job(scores(10))
    labels = write(tmp_path / "a.csv", "id,label\n1,0\n2,1\n")
    first = add_actuals(store, job, read_file(labels, "id", "label"))
    again = add_actuals(store, job, read_file(labels, "id", "label"))
    assert first.new and not again.new
    assert again.digest == first.digest and again.added_at == first.added_at
    assert again.labelled == 2 and len(store.actuals.parts(job)) == 1
    # One content, one digest: the same ids and labels from a query are the same part.
    db = tmp_path / "labels.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE outcomes (customer INTEGER, churned INTEGER)")
        conn.executemany("INSERT INTO outcomes VALUES (?, ?)", [(1, 0), (2, 1)])
        conn.commit()
    query = read_query("SELECT customer, churned FROM outcomes", f"sqlite://{db}", "customer",
                       "churned")  # fmt: skip
    assert not add_actuals(store, job, query).new


def test_an_id_keeps_its_first_label_and_later_parts_count_it_repeated(
    store: Store, tmp_path: Path, finished_job: FinishedJob
) -> None:
    job = finished_job(scores(10))
    add_actuals(store, job, from_records([{"id": 1, "label": 0}, {"id": 2, "label": 1}]))
    later = add_actuals(store, job, from_records([{"id": 2, "label": 0}, {"id": 3, "label": 1}]))
    assert (later.matched, later.repeated, later.unknown, later.labelled) == (1, 1, 0, 3)
    rows = pa.concat_tables(store.actuals.rows(job)).to_pylist()
    assert sorted(r["label"] for r in rows) == ["0", "1", "1"]  # id 2 kept its first label
    assert {"label": "0", "prediction": "0", "proba": "0.95,0.05"} in rows  # id 1's


def test_ids_are_read_as_the_jobs_id_type(
    store: Store, tmp_path: Path, finished_job: FinishedJob
) -> None:
    job = finished_job(scores(10))
    labels = write(tmp_path / "a.csv", "id,label\n007,1\n8.0,0\n")
    added = add_actuals(store, job, read_file(labels, "id", "label"))
    assert (added.matched, added.unknown) == (1, 1), added  # "8.0" is no integer id
    text = pa.table({"id": pa.array(["a", "b"]), "prediction": pa.array(["x", "y"])})
    job2 = finished_job(text)
    mixed = from_records([{"id": "a", "label": "y"}, {"id": 1, "label": "x"}])
    added = add_actuals(store, job2, mixed)
    assert (added.matched, added.unknown) == (1, 1)


def test_parquet_and_jsonl_parts(store: Store, tmp_path: Path, finished_job: FinishedJob) -> None:
    job = finished_job(scores(10))
    parquet = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": [4, 5], "y": [1, 0]}), parquet)
    assert add_actuals(store, job, read_file(str(parquet), "id", "y")).matched == 2
    jsonl = write(tmp_path / "b.jsonl", '{"id": 6, "y": 1}\n\n{"id": 7, "y": 0}\n')
    assert add_actuals(store, job, read_file(jsonl, "id", "y")).labelled == 4


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("n.csv", "id,label\n1,0\n,1\n", "n.csv line 3: id column 'id' is empty"),
        ("l.csv", "id,label\n1,0\n2,\n", "l.csv line 3: label column 'label' is empty"),
        ("m.csv", "cid,label\n1,0\n", "m.csv: no id column 'id' (it has cid, label)"),
        ("j.jsonl", '{"id": 1, "label": 0}\n\n{"id": 2}\n', "j.jsonl line 3: label column"),
        ("j.txt", "id,label\n", "expected a .parquet, .csv or .jsonl file"),
    ],
)
def test_errors_name_the_file_the_line_and_the_field(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(MonitorError) as caught:
        read_file(path, "id", "label")
    assert said in str(caught.value)


def test_compressed_text_parts_are_read_and_named_by_line(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": 1, "label": 0}\n\n{"id": 2, "label": null}\n'))
    with pytest.raises(MonitorError, match=r"labels.jsonl.gz line 3: label column 'label'"):
        read_file(str(path), "id", "label")
    csv = tmp_path / "labels.csv.gz"
    csv.write_bytes(gzip.compress(b"id,label\n1,0\n2,1\n"))
    assert read_file(str(csv), "id", "label").ids.to_pylist() == ["1", "2"]


def test_a_null_id_in_parquet_and_in_records_is_named_by_row(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": [1, None], "label": [0, 1]}), path)
    with pytest.raises(MonitorError, match=r"p.parquet row 1: id column 'id' is empty"):
        read_file(str(path), "id", "label")
    with pytest.raises(MonitorError, match=r"records\[1\]: no 'label' field"):
        from_records([{"id": 1, "label": 0}, {"id": 2}])


def test_a_job_without_ids_or_whose_output_was_replaced_takes_no_actuals(
    store: Store, tmp_path: Path, finished_job: FinishedJob
) -> None:
    no_ids = finished_job(scores(4), id_column=None)
    part = from_records([{"id": 1, "label": 0}])
    with pytest.raises(MonitorError, match="has no id column"):
        add_actuals(store, no_ids, part)
    shared = tmp_path / "shared-out"
    first = finished_job(scores(4), sink=shared)
    finished_job(scores(4), sink=shared)
    with pytest.raises(MonitorError, match="predictions were replaced"):
        add_actuals(store, first, part)


def test_in_an_append_folder_a_job_joins_its_own_parts_only(
    store: Store, tmp_path: Path, finished_job: FinishedJob
) -> None:
    shared = tmp_path / "appended"
    first = finished_job(scores(4), sink=shared, mode="append")
    later = scores(4).set_column(1, "prediction", pa.array([7, 7, 7, 7], pa.int64()))
    finished_job(later, sink=shared, mode="append")
    added = add_actuals(store, first, from_records([{"id": 1, "label": 0}]))
    assert (added.matched, added.predicted) == (1, 4)
    assert [r["prediction"] for r in pa.concat_tables(store.actuals.rows(first)).to_pylist()] == [
        "0"
    ]


def test_a_large_part_is_joined_in_one_go(
    store: Store, tmp_path: Path, finished_job: FinishedJob
) -> None:
    rows = 200_000
    job = finished_job(scores(rows))
    ids = pa.array(range(rows, 0, -1), pa.int64())  # every id, in reverse order
    part = read_file(_parquet(tmp_path, ids, pa.array([1] * rows)), "id", "y")
    started = time.monotonic()
    added = add_actuals(store, job, part)
    assert (added.matched, added.coverage) == (rows, 1.0)
    assert time.monotonic() - started < 30


def _parquet(folder: Path, ids: pa.Array, labels: pa.Array) -> str:
    path = folder / "big.parquet"
    pq.write_table(pa.table({"id": ids, "y": labels}), path)
    return str(path)


def test_the_prediction_column_can_be_named_and_probabilities_alone_predict_a_class(
    store: Store, tmp_path: Path, finished_job: FinishedJob
) -> None:
    from thresher.monitor.metrics import ClassificationMetrics, RegressionMetrics
    from thresher.monitor.quality import job_quality

    table = scores(10)
    labels = write(tmp_path / "a.csv", "id,label\n1,0.5\n2,0.25\n3,1\n")
    scored = finished_job(table.select(["id"]).append_column("score", table.column("proba_1")))
    with pytest.raises(MonitorError, match=r"no 'prediction' column .*--prediction-column"):
        add_actuals(store, scored, read_file(labels, "id", "label"))
    added = add_actuals(store, scored, read_file(labels, "id", "label"), "score")
    assert added.matched == 3
    quality = job_quality(store, scored, None)
    assert quality.task == "regression" and isinstance(quality.metrics, RegressionMetrics)
    assert quality.metrics.mae == pytest.approx((0.45 + 0.10 + 0.75) / 3)  # ids 1-3: .05 .15 .25

    probas = finished_job(table.select(["id", "proba_0", "proba_1"]))
    classes = write(tmp_path / "b.csv", "id,label\n1,0\n6,1\n7,0\n")  # p1 .05 .55 .65
    add_actuals(store, probas, read_file(classes, "id", "label"))
    quality = job_quality(store, probas, None)
    assert isinstance(quality.metrics, ClassificationMetrics)
    assert quality.metrics.accuracy == pytest.approx(2 / 3)
