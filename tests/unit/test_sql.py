"""SQL pieces that need no server: spec keys, key ranges, URL redaction, DuckDB's ingest.

The same parts against a live server are in tests/integration/test_postgres.py.
"""

from __future__ import annotations

import itertools
from contextlib import closing
from pathlib import Path

import pyarrow as pa
import pytest

from thresher.errors import SpecError
from thresher.postgres import PgUrl, without_password
from thresher.sinks.duckdb import duckdb_sink
from thresher.sources.sql import split_key_range
from thresher.spec import SinkSection, parse_spec

PASSWORD = "pg-s3cret-never-shown"


def test_spec_keys_for_postgresql() -> None:
    base = {"model": {"kind": "sklearn", "uri": "m.skops"}, "sink": {"uri": "out/"}}
    source = {"uri": "postgres://h/db", "query": "SELECT 1 AS id", "id_column": "id"}
    spec = parse_spec({**base, "source": source})
    assert (spec.source.format, spec.source.shard_rows, spec.source.key_column) == (
        "postgresql",
        1_000_000,
        None,
    )
    sink = parse_spec(
        {**base, "source": {"uri": "x.csv"}, "sink": {"uri": "postgresql://h/d?table=t"}}
    )
    assert sink.sink.format == "postgresql"
    problems = [
        ({"uri": "postgresql://h/db", "id_column": "id"}, "source.query: required"),
        ({"uri": "postgresql://h/db", "query": "SELECT 1"}, "source.key_column: required"),
        ({"uri": "x.csv", "query": "SELECT 1"}, "source.query: only a SQL source"),
    ]
    for source, message in problems:
        with pytest.raises(SpecError, match=message):
            parse_spec({**base, "source": source})
    with pytest.raises(SpecError, match=r"sink\.staging: only a SQL sink"):
        parse_spec({**base, "source": {"uri": "x.csv"}, "sink": {"uri": "o/", "staging": "s"}})


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"uri": "sqlite:///x.db", "query": "SELECT 1 AS id", "id_column": "id"}, None),
        ({"uri": "duckdb:///x.duckdb", "query": "SELECT 1 AS k", "key_column": "k"}, None),
        ({"uri": "duckdb://", "query": "SELECT 1 AS k", "key_column": "k"}, None),
        ({"uri": "sqlite:///x.db", "id_column": "id"}, "source.query: required for a sqlite"),
        ({"uri": "duckdb:///x.duckdb", "query": "SELECT 1"}, "source.key_column: required"),
        ({"uri": "x.duckdb", "format": "duckdb", "query": "SELECT 1"}, "source.uri: a duckdb"),
        ({"uri": "sqlite:///x.db", "format": "duckdb", "query": "S"}, "source.uri: a duckdb"),
    ],
)
def test_spec_keys_for_sqlite_and_duckdb_sources(
    source: dict[str, str], message: str | None
) -> None:
    base = {"model": {"kind": "sklearn", "uri": "m.skops"}, "sink": {"uri": "out/"}}
    if message is None:
        assert parse_spec({**base, "source": source}).source.format == source["uri"][:6]
    else:
        with pytest.raises(SpecError, match=message):
            parse_spec({**base, "source": source})


def test_spec_keys_for_a_duckdb_sink() -> None:
    base = {"model": {"kind": "sklearn", "uri": "m.skops"}, "source": {"uri": "x.csv"}}
    sink = parse_spec({**base, "sink": {"uri": "duckdb:///o.duckdb?table=t", "staging": "s"}})
    assert sink.sink.format == "duckdb"
    with pytest.raises(SpecError, match=r"sink\.uri: a duckdb sink needs duckdb:///"):
        parse_spec({**base, "sink": {"uri": "out/", "format": "duckdb"}})
    with pytest.raises(SpecError, match=r"sink\.format: a duckdb:// uri writes a table"):
        parse_spec({**base, "sink": {"uri": "duckdb:///o.duckdb?table=t", "format": "csv"}})


@pytest.mark.parametrize(
    ("low", "high", "rows", "shard_rows"),
    [(1, 100, 100, 30), (-5, 5, 11, 100), (0, 9, 10, 1), (7, 7, 3, 1), (0, 10**12, 5000, 999)],
)
def test_key_ranges_cover_every_key_once(low: int, high: int, rows: int, shard_rows: int) -> None:
    ranges = split_key_range(low, high, rows, shard_rows)
    assert ranges[0][0] == low and ranges[-1][1] == high + 1
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(ranges))
    assert len(ranges) <= max(1, -(-rows // shard_rows))
    assert split_key_range(None, None, 0, shard_rows) == []


def test_urls_lose_their_password_and_thresher_keys() -> None:
    url = PgUrl.parse(f"postgresql://me:{PASSWORD}@db:5433/shop?sslmode=disable&table=t")
    assert (url.redacted, url.own, url.database) == (
        "postgresql://me@db:5433/shop",
        {"table": "t"},
        "shop",
    )
    assert url.libpq == f"postgresql://me:{PASSWORD}@db:5433/shop?sslmode=disable"
    assert PASSWORD not in url.hide(f"error near {PASSWORD}")
    assert without_password(f"postgres://me:{PASSWORD}@db/x") == "postgres://me:***@db/x"
    assert without_password("out/") == "out/"


@pytest.mark.parametrize("append", [False, True])
def test_duckdb_reads_staged_parts_with_their_types(tmp_path: Path, append: bool) -> None:
    """DuckDB's own client takes each staged part's Arrow rows: lists, time zones,
    nulls and strings land as ADBC would put them, into a new table or, matched by
    name, into an existing one."""
    duckdb = pytest.importorskip("duckdb")
    parts = [
        pa.table(
            {
                "id": pa.array([shard * 10 + i for i in range(3)], pa.int64()),
                "label": ["a", None, "c'"],
                "embedding": pa.array([[0.5, 1.0]] * 3, pa.list_(pa.float32())),
                "at": pa.array([0, 1, None], pa.timestamp("us", tz="UTC")),
            }
        )
        for shard in range(2)
    ]
    db = tmp_path / "o'dd.duckdb"
    section = SinkSection(uri=f"duckdb:///{db}?table=t", mode="append" if append else "overwrite")
    for job, tag in (("20260101-000000-000001", "a"), ("20260102-000000-000002", "b")):
        sink = duckdb_sink(section)
        sink.start(job, len(parts), resume=False)
        target = sink.part_target()
        for shard, part in enumerate(parts):
            writer = target.open(shard, tag)
            writer.write(part)
            sink.commit(writer.close(), None)
        sink.finish({"job_id": job})
    with closing(duckdb.connect(str(db), read_only=True)) as conn:
        got = conn.sql("SELECT * FROM t ORDER BY id").to_arrow_table()
        types = dict(conn.execute("SELECT column_name, data_type FROM duckdb_columns()"
                                  " WHERE table_name = 't'").fetchall())  # fmt: skip
    want = pa.concat_tables(parts * (2 if append else 1)).sort_by("id")
    assert got.to_pylist() == want.to_pylist()
    assert types == {"id": "BIGINT", "label": "VARCHAR", "embedding": "FLOAT[]",
                     "at": "TIMESTAMP WITH TIME ZONE"}  # fmt: skip


def test_a_duckdb_part_that_does_not_fit_the_table_names_its_column(tmp_path: Path) -> None:
    """A shard's part with a column its job's earlier parts lack fails with DuckDB's own
    word on that column (not the aborted transaction's complaint about cleaning up);
    the shard redone with rows that fit commits on a fresh transaction, once."""
    duckdb = pytest.importorskip("duckdb")
    db = tmp_path / "o.duckdb"
    section = SinkSection(uri=f"duckdb:///{db}?table=t", mode="append")
    first = duckdb_sink(section)
    first.start("20260101-000000-000001", 1, resume=False)
    writer = first.part_target().open(0, "a")
    writer.write(pa.table({"id": [1, 2]}))
    first.commit(writer.close(), None)
    first.finish({"job_id": "20260101-000000-000001"})

    sink = duckdb_sink(section)
    sink.start("20260102-000000-000002", 2, resume=False)
    attempts = [
        (0, "a", pa.table({"id": [3]})),
        (1, "a", pa.table({"id": [4], "extra": [0.5]})),
        (1, "b", pa.table({"id": [4]})),
    ]
    for shard, attempt, part in attempts:
        writer = sink.part_target().open(shard, attempt)
        writer.write(part)
        if "extra" in part.column_names:
            with pytest.raises(Exception, match='"extra"'):
                sink.commit(writer.close(), None)
        else:
            sink.commit(writer.close(), None)
    sink.finish({"job_id": "20260102-000000-000002"})
    with closing(duckdb.connect(str(db), read_only=True)) as conn:
        rows = conn.execute("SELECT id FROM t ORDER BY id").fetchall()
        columns = [c[0] for c in conn.execute("SELECT * FROM t LIMIT 0").description]
    assert (rows, columns) == ([(1,), (2,), (3,), (4,)], ["id"])


@pytest.mark.parametrize("database", ["sqlite", "duckdb"])
@pytest.mark.parametrize("change", ["retyped", "dropped"])
def test_a_table_changed_between_the_plan_and_a_read_fails_naming_its_column(
    tmp_path: Path, database: str, change: str
) -> None:
    """As a resume reads the shards a plan made earlier: a column now of a type its
    values do not cast from, or gone, is a SourceError naming it, not rows made up
    (DuckDB itself refuses a query of a column gone, naming it)."""
    from thresher.errors import SourceError
    from thresher.sources import open_source
    from thresher.spec import SourceSection

    path = tmp_path / f"in.{database}"
    new = {"retyped": "id INTEGER, x TEXT", "dropped": "id INTEGER"}[change]
    rows = {"retyped": ", 'v' || id", "dropped": ""}[change]
    if database == "sqlite":
        import sqlite3

        def run(*statements: str) -> None:
            with closing(sqlite3.connect(path)) as db:
                for statement in statements:
                    db.execute(statement)
                db.commit()
    else:
        duckdb = pytest.importorskip("duckdb")

        def run(*statements: str) -> None:
            with closing(duckdb.connect(str(path))) as db:
                for statement in statements:
                    db.execute(statement)

    run(
        "CREATE TABLE t (id INTEGER, x REAL)",
        "CREATE TABLE ids (id INTEGER)",
        "INSERT INTO ids VALUES (1), (2), (3)",
        "INSERT INTO t SELECT id, id * 0.5 FROM ids",
    )
    section = SourceSection.model_validate(
        {"uri": f"{database}:///{path}", "query": "SELECT * FROM t", "key_column": "id"}
    )
    source = open_source(section)
    plan = source.plan()
    reader = source.reader(plan.schema, plan.schema.names)
    run("DROP TABLE t", f"CREATE TABLE t ({new})", f"INSERT INTO t SELECT id{rows} FROM ids")
    refused = database == "duckdb" and change == "dropped"
    said = r'column "x" not found' if refused else r"'x'.*schema changed since the job"
    with pytest.raises(SourceError, match=r"source\.query: .*" + said):
        [chunk for shard in plan.shards for chunk in reader.read(shard, 10)]
