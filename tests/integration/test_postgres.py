"""PostgreSQL for real: the job store, the sink and the source against a live server.

`scripts/postgres.sh` starts a throwaway server on 127.0.0.1 and prints its URL;
`scripts/test.sh` exports it as THRESHER_TEST_POSTGRES. Without it these tests skip
locally and fail in CI (`CI` set), so a missing server never passes silently. Each test
works in a schema of its own (via libpq's `options=-csearch_path=…`), dropped afterwards.
The URLs carry a password the server ignores (trust auth), to check it never leaks.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thresher.errors import SinkError, SourceError
from thresher.sinks import open_sink
from thresher.sources import open_source
from thresher.spec import JobSpec, SinkSection, SourceSection
from thresher.store import JobState, ShardState, Store, StoreError, open_store
from thresher.testing import check_sink, check_source

pytestmark = pytest.mark.integration

THRESHER = str(Path(sys.executable).parent / "thresher")
PASSWORD = "pg-s3cret-never-shown"
FEATURES = ["f0", "f1", "f2", "f3"]
WEIGHTS = np.array([1.5, -2.0, 0.8, 1.1])

SLOW_MODEL = """
import time

class Scorer:
    def predict(self, batch):
        time.sleep(0.02)  # slow enough that the kill lands with shards still to do
        return {"score": batch["f0"] * 2.0 + batch["f1"]}
"""

PICKY_MODEL = """
class Scorer:
    def predict(self, batch):
        if (batch["f0"] > LIMIT).any():
            raise ValueError("f0 out of range")
        return {"score": batch["f0"] * 2.0 + batch["f1"]}
"""


@dataclass(frozen=True)
class Pg:
    """One test's schema on the server, and ways to reach it."""

    server: str
    schema: str

    @property
    def url(self) -> str:
        """The server URL with a password added and this schema first on the search path."""
        parts = urlsplit(self.server)
        netloc = f"{parts.username}:{PASSWORD}@{parts.hostname}:{parts.port}"
        query = f"options={quote(f'-csearch_path={self.schema}')}"
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))

    def sink(self, table: str) -> str:
        return f"{self.url}&table={table}"

    def read(self, sql: str) -> pa.Table:
        import adbc_driver_postgresql.dbapi as pg_adbc

        with closing(pg_adbc.connect(self.url)) as conn, closing(conn.cursor()) as cur:
            cur.execute(sql)
            return cur.fetch_arrow_table()

    def load(self, name: str, table: pa.Table, *statements: str) -> None:
        import adbc_driver_postgresql.dbapi as pg_adbc

        with closing(pg_adbc.connect(self.url)) as conn, closing(conn.cursor()) as cur:
            cur.adbc_ingest(name, table, mode="create")
            for statement in statements:
                cur.execute(statement)
            conn.commit()


@pytest.fixture
def pg(postgres_server: str, pg_schema: str) -> Pg:
    return Pg(postgres_server, pg_schema)


@contextmanager
def store_at(url: str) -> Iterator[Store]:
    """A job store, closed afterwards (an open connection would warn, an error here)."""
    store = open_store(url)
    try:
        yield store
    finally:
        store.db.close()


def customers(rows: int, seed: int = 0) -> pa.Table:
    """A shuffled int64 id, float features and a text keep column."""
    rng = np.random.default_rng(seed)
    data: dict[str, Any] = {"id": rng.permutation(rows).astype(np.int64) + 1_000}
    data |= {name: rng.normal(size=rows) for name in FEATURES}
    data["segment"] = np.array(["retail", "premium"])[rng.integers(0, 2, rows)]
    return pa.table(data)


def train(root: Path, table: pa.Table) -> Any:
    """A saved skops model and the fitted estimator, for the direct call to compare with."""
    import skops.io
    from sklearn.linear_model import LogisticRegression

    x = np.column_stack([table.column(f).to_numpy() for f in FEATURES])
    model = LogisticRegression(max_iter=500).fit(x, (x @ WEIGHTS > 0).astype(np.int64))
    skops.io.dump(model, root / "model.skops")
    return model


def write_spec(root: Path, sections: dict[str, dict[str, Any]]) -> Path:
    lines = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    path = root / "job.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def thresher(store: str, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("THRESHER_FAULT", "THRESHER_STORE")}
    env |= {"THRESHER_FAULT": fault} if fault else {}
    return subprocess.run(
        [THRESHER, "--store", store, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def expected(model: Any, table: pa.Table) -> dict[str, np.ndarray]:
    x = np.column_stack([table.column(f).to_numpy() for f in FEATURES])
    return {"prediction": model.predict(x), "proba_1": model.predict_proba(x)[:, 1]}


def test_store_keeps_jobs_shards_attempts_and_cancels(pg: Pg, job_spec: Any) -> None:
    with store_at(pg.url) as store, store_at(pg.url) as other:
        check_store(store, other, job_spec(job={"name": "nightly"}))


def check_store(store: Store, other: Store, spec: JobSpec) -> None:
    plan = {"shards": [{"index": i} for i in range(3)], "schema": ""}
    store.create_job("job-1", "nightly", spec, plan)
    store.attempt_started("job-1", 0, "a0", 1)
    store.shard_done("job-1", 0, "a0", (10, 9, 1), 0.5)
    store.attempt_started("job-1", 1, "a1", 1)
    store.attempt_failed("job-1", 1, "a1", "boom", final=True)
    job = other.job("job-1")  # a second connection sees it all
    assert (job.name, job.state, job.spec, job.shard_count) == ("nightly", "running", spec, 3)
    states = [s.state for s in store.shards("job-1")]
    assert states == [ShardState.DONE, ShardState.FAILED, ShardState.PENDING]
    totals = store.totals("job-1")
    assert (totals.shards_done, totals.shards_failed, totals.rows_in) == (1, 1, 10)
    assert (totals.rows_out, totals.rows_error) == (9, 1)
    with pytest.raises(StoreError, match="being run by"):
        store.claim("job-1")  # this very process owns it, and it is alive
    assert store.claim("job-1", force=True).state == JobState.RUNNING
    assert store.request_cancel("job-1") == JobState.CANCELLED
    assert store.heartbeat("job-1") == JobState.CANCELLED
    assert [j.id for j in store.jobs()] == ["job-1"]
    with pytest.raises(StoreError, match="no job"):
        store.job("job-2")


def test_sink_writes_every_row_once_through_the_cli(pg: Pg, tmp_path: Path) -> None:
    table = customers(3000)
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=300)
    model = train(tmp_path, table)
    spec = write_spec(
        tmp_path,
        {
            "source": {"uri": "in.parquet", "id_column": "id", "shard_bytes": 1024},
            "model": {"kind": "sklearn", "uri": "model.skops", "outputs": ["prediction", "proba"]},
            "run": {"workers": 2},
            "sink": {"uri": pg.sink("scores"), "keep_columns": ["segment"], "staging": "side"},
        },
    )
    result = thresher(pg.url, "run", str(spec))
    assert result.returncode == 0, result.stderr
    out = pg.read("SELECT * FROM scores ORDER BY id")
    assert out.column_names == ["id", "segment", "prediction", "proba_0", "proba_1"]
    inputs = table.sort_by("id")
    assert out.column("id").to_pylist() == inputs.column("id").to_pylist()
    assert out.column("segment").to_pylist() == inputs.column("segment").to_pylist()
    want = expected(model, inputs)
    np.testing.assert_array_equal(out.column("prediction").to_numpy(), want["prediction"])
    np.testing.assert_allclose(out.column("proba_1").to_numpy(), want["proba_1"], rtol=1e-12)
    manifest = json.loads((tmp_path / "side" / "_SUCCESS").read_text())
    assert (manifest["rows_in"], manifest["rows_out"], manifest["table"]) == (3000, 3000, "scores")
    ledger = pg.read(
        "SELECT count(*) AS n, sum(rows)::bigint AS r FROM _thresher_parts"
    ).to_pylist()[0]
    assert ledger == {"n": 10, "r": 3000}
    with store_at(pg.url) as store:
        assert store.jobs()[0].state == JobState.SUCCEEDED
    assert PASSWORD not in result.stderr + result.stdout


def test_committing_a_shard_twice_writes_it_once(pg: Pg, tmp_path: Path) -> None:
    section = SinkSection(uri=pg.sink("scores"), staging=str(tmp_path / "side"))
    sink = open_sink(section)
    sink.start("job-1", shard_count=1, resume=False)
    rows = pa.table({"id": [1, 2, 3], "prediction": [0.5, 0.25, 0.125]})
    staged = []
    for attempt in ("a1", "a2"):  # the shard redone after a crash: a second staging file
        writer = sink.part_target().open(0, attempt)
        writer.write(rows)
        staged.append(writer.close())
    for part in (staged[0], staged[0], staged[1]):
        sink.commit(part, None)
    sink.finish({"job_id": "job-1"})  # the table takes the job's rows only now
    assert pg.read("SELECT id FROM scores ORDER BY id").column("id").to_pylist() == [1, 2, 3]
    assert not list((tmp_path / "side").rglob("*.parquet")), "staging files are cleaned up"


def test_sink_refuses_a_table_it_did_not_write(pg: Pg, tmp_path: Path) -> None:
    pg.load("precious", pa.table({"id": [7]}))
    section = SinkSection(uri=pg.sink("precious"), staging=str(tmp_path / "side"))
    with pytest.raises(SinkError, match="thresher did not write it") as refused:
        open_sink(section).start("job-1", 1, resume=False)
    assert PASSWORD not in str(refused.value)
    assert pg.read("SELECT id FROM precious").column("id").to_pylist() == [7]
    forced = open_sink(section.model_copy(update={"force": True}))
    forced.start("job-2", 1, resume=False)
    # Forced, the table is replaced when the job finishes, not when it starts.
    assert pg.read("SELECT id FROM precious").column("id").to_pylist() == [7]
    forced.finish({"job_id": "job-2"})
    assert (
        pg.read(f"SELECT to_regclass('{pg.schema}.precious') AS t").column("t")[0].as_py() is None
    )


def test_source_reads_every_id_once_with_the_same_predictions(pg: Pg, tmp_path: Path) -> None:
    table = customers(3000, seed=4)
    model = train(tmp_path, table)
    missing = int(table.column("id")[17].as_py())  # a row the model cannot take
    pg.load(
        "customers",
        table,
        "ALTER TABLE customers ALTER COLUMN f3 TYPE numeric USING f3::numeric",
        f"UPDATE customers SET f0 = NULL WHERE id = {missing}",
    )
    query = "SELECT id, segment, f0, f1, f2, f3 FROM customers WHERE id >= 0"
    spec = write_spec(
        tmp_path,
        {
            "source": {"uri": pg.url, "query": query, "id_column": "id", "shard_rows": 700},
            "model": {"kind": "sklearn", "uri": "model.skops", "outputs": ["prediction", "proba"]},
            "run": {"workers": 2},
            "sink": {"uri": "out/", "keep_columns": ["segment"]},
        },
    )
    result = thresher(f"sqlite:///{tmp_path / 'store.db'}", "run", str(spec))
    assert result.returncode == 0, result.stderr
    out = pq.read_table(sorted((tmp_path / "out").glob("part-*.parquet"))).sort_by("id")
    ids = Counter(out.column("id").to_pylist())
    assert set(ids.values()) == {1} and len(ids) == 2999 and missing not in ids
    inputs = table.filter(pa.compute.not_equal(table.column("id"), missing)).sort_by("id")
    want = expected(model, inputs)
    np.testing.assert_array_equal(out.column("prediction").to_numpy(), want["prediction"])
    np.testing.assert_allclose(out.column("proba_1").to_numpy(), want["proba_1"], atol=1e-9)
    error_files = sorted((tmp_path / "out" / "_errors").glob("*.jsonl"))
    errors = [json.loads(line) for path in error_files for line in path.read_text().splitlines()]
    assert [(e["id"], e["stage"], e["error"]) for e in errors] == [
        (missing, "decode", "MissingValue")
    ]
    assert errors[0]["source"].startswith("postgresql://thresher@127.0.0.1:")
    assert errors[0]["source"].endswith(f"({query})") and isinstance(errors[0]["row"], int)
    assert PASSWORD not in result.stderr + json.dumps(errors)


def test_source_plan_is_deterministic_and_checks_the_key(pg: Pg) -> None:
    pg.load("t", pa.table({"k": pa.array(range(100, 1100), pa.int32()), "x": [1.0] * 1000}))
    section = SourceSection(uri=pg.url, query="SELECT k, x FROM t;", key_column="k", shard_rows=300)
    plan = open_source(section).plan()
    assert plan == open_source(section).plan()
    assert [(s.start, s.stop) for s in plan.shards] == [
        (100, 350),
        (350, 600),
        (600, 850),
        (850, 1100),
    ]
    reader = pickle.loads(pickle.dumps(open_source(section).reader(plan.schema, ["x"])))
    chunks = [c for s in plan.shards for c in reader.read(s, 100)]
    assert (
        sum(c.table.num_rows for c in chunks) == 1000
        and max(len(c.positions) for c in chunks) == 100
    )
    bad = [
        ("SELECT x::int AS k, x FROM t UNION ALL SELECT NULL, 1.0", "null"),
        ("SELECT x AS k FROM t", "not an integer"),
        ("SELECT nope FROM t", "PostgreSQL refused it"),
    ]
    for query, message in bad:
        with pytest.raises(SourceError, match=message) as failed:
            open_source(section.model_copy(update={"query": query})).plan()
        assert PASSWORD not in str(failed.value)


def test_source_too_small_for_its_workers_gets_smaller_key_ranges(pg: Pg) -> None:
    pg.load("w", pa.table({"k": pa.array(range(10_000), pa.int32()), "x": [1.0] * 10_000}))
    section = SourceSection(uri=pg.url, query="SELECT k, x FROM w", key_column="k")
    assert [(s.start, s.stop) for s in open_source(section).plan().shards] == [(0, 10_000)]
    plan = open_source(section, min_shards=2).plan()
    assert [(s.start, s.stop) for s in plan.shards] == [(0, 5_000), (5_000, 10_000)]
    assert len(open_source(section, min_shards=4).plan().shards) == 2  # 4,096 rows at least


def test_killed_after_commit_then_resumed_holds_every_id_once(pg: Pg, tmp_path: Path) -> None:
    table = customers(6000, seed=2)
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=500)
    (tmp_path / "model.py").write_text(SLOW_MODEL, encoding="utf-8")
    spec = write_spec(
        tmp_path,
        {
            "source": {"uri": "in.parquet", "id_column": "id", "shard_bytes": 1024},
            "model": {"kind": "python", "uri": "model.py:Scorer", "batch_format": "numpy"},
            "batch": {"size": 250},
            "run": {"workers": 2},
            "sink": {"uri": pg.sink("scores"), "staging": "side"},
        },
    )
    killed = thresher(pg.url, "run", str(spec), fault="after_commit:2")
    assert killed.returncode == -9, killed.stderr
    newest = pg.read("SELECT id FROM thresher_jobs ORDER BY created_at DESC LIMIT 1")
    job_id = newest.column("id")[0].as_py()
    # Shard 2 is in the table, but the store never heard: resume redoes it.
    assert 2 in pg.read("SELECT shard FROM _thresher_parts").column("shard").to_pylist()
    states = pg.read(f"SELECT state FROM thresher_shards WHERE job_id = '{job_id}' AND idx = 2")
    assert states.column("state").to_pylist() != ["done"]
    resumed = thresher(pg.url, "resume", job_id)
    assert resumed.returncode == 0, resumed.stderr
    ids = Counter(pg.read("SELECT id FROM scores").column("id").to_pylist())
    assert ids == Counter(table.column("id").to_pylist())
    with store_at(pg.url) as store:
        assert store.job(job_id).state == JobState.SUCCEEDED
    assert (tmp_path / "side" / "_SUCCESS").exists()


def test_retry_errors_adds_the_fixed_rows_once(pg: Pg, tmp_path: Path) -> None:
    table = customers(2000, seed=5)
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=400)
    model = tmp_path / "model.py"
    model.write_text(PICKY_MODEL.replace("LIMIT", "2.0"), encoding="utf-8")
    spec = write_spec(
        tmp_path,
        {
            "source": {"uri": "in.parquet", "id_column": "id", "shard_bytes": 1024},
            "model": {"kind": "python", "uri": "model.py:Scorer", "batch_format": "numpy"},
            "run": {"workers": 2},
            "sink": {"uri": pg.sink("scores"), "staging": "side"},
        },
    )
    store = f"sqlite:///{tmp_path / 'store.db'}"
    assert thresher(store, "run", str(spec)).returncode == 0
    first = pg.read("SELECT count(*) AS n FROM scores").column("n")[0].as_py()
    assert 0 < 2000 - first == sum(1 for v in table.column("f0").to_pylist() if v > 2.0)
    model.write_text(PICKY_MODEL.replace("LIMIT", "99.0"), encoding="utf-8")  # the fix
    with store_at(store) as jobs:
        job_id = jobs.jobs()[0].id
    retried = thresher(store, "retry-errors", job_id)
    assert retried.returncode == 0, retried.stderr
    ids = Counter(pg.read("SELECT id FROM scores").column("id").to_pylist())
    assert ids == Counter(table.column("id").to_pylist())
    keys = set(pg.read("SELECT job_id FROM _thresher_parts").column("job_id").to_pylist())
    assert keys == {job_id, f"{job_id}.r1"}


def test_the_postgresql_source_and_sink_keep_the_contract(pg: Pg, tmp_path: Path) -> None:
    """`thresher.testing`'s checks, as for every built-in plug-in."""
    check_sink(lambda: open_sink(SinkSection(uri=pg.sink("contract"), staging=str(tmp_path))))
    pg.load("contract_in", customers(3000, seed=5))
    query = "SELECT id, f0, f1 FROM contract_in"
    section = SourceSection(uri=pg.url, query=query, id_column="id", shard_rows=700)
    assert len(check_source(open_source(section, min_shards=2)).shards) > 1


def test_trigger_claims_on_one_postgresql_store_take_each_file_once(pg: Pg) -> None:
    from datetime import UTC, datetime, timedelta

    from thresher.store import SetOutcome, TakenFile

    a, b, c = (TakenFile(f"s3://in/{n}.csv", 1, "e1") for n in "abc")
    with store_at(pg.url) as one, store_at(pg.url) as two:
        first, second = one.triggers, two.triggers
        assert first.claim("t", "k1", [a, b], "one")
        assert not second.claim("t", "k2", [c, b], "two")  # b is taken: all rolled back
        assert second.taken("t") == {a.path: {(1, "e1")}, b.path: {(1, "e1")}}
        assert second.unsettled("t") == ["k1"] and second.set_files("t", "k1") == [a.path, b.path]
        first.settle("t", "k1", SetOutcome.STARTED, job_id="job-1")
        assert second.claim("t", "k3", [c], "two")
        assert second.files_seen() == {"t": 3}
        assert first.reset("t", datetime.now(UTC) - timedelta(hours=1), "ops") == 2  # k3 open
        assert first.epoch("t") == 1 and second.resets("t")[0].forgotten == 2
