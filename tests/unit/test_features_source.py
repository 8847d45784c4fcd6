"""The `features` source against a brute-force point-in-time join written out row by row:
ties, rows later than the as-of time, expired features, entities with no features, and
several tables at once (Parquet files, a CSV file, a DuckDB table)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from thresher.errors import SpecError
from thresher.sources import open_source
from thresher.spec import SourceSection, load_spec, parse_spec
from thresher.testing import check_source

T0 = dt.datetime(2024, 1, 1)
DAY = dt.timedelta(days=1)


def entities(rows: int = 3_000, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "customer_id": rng.integers(0, 260, rows),  # 200..259 have no features
            "as_of": [T0 + DAY * int(d) for d in rng.integers(0, 60, rows)],
            "region": [f"r{int(r)}" for r in rng.integers(0, 5, rows)],
        }
    )


def features(rows: int, seed: int, value: str, key: str = "customer_id") -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            key: rng.integers(0, 200, rows),
            # few distinct days: many (key, time) ties, and many rows later than an as-of
            "event_time": [T0 + DAY * int(d) for d in rng.integers(0, 70, rows)],
            value: np.round(rng.standard_normal(rows), 6),
        }
    )


def brute_force(
    ents: pa.Table,
    rows: Sequence[dict[str, Any]],
    value: str,
    ttl: dt.timedelta | None,
    key: str = "customer_id",
) -> list[Any]:
    """Each entity's feature: the latest row at or before its time, the last of a tie
    (`rows` in file order), None if none or older than `ttl`."""
    got = []
    for entity in ents.to_pylist():
        best: dict[str, Any] | None = None
        for row in rows:
            match = row[key] == entity["customer_id"] and row["event_time"] <= entity["as_of"]
            if match and (best is None or row["event_time"] >= best["event_time"]):
                best = row
        fresh = best is not None and (ttl is None or entity["as_of"] - best["event_time"] <= ttl)
        got.append(best[value] if best is not None and fresh else None)
    return got


def section(uri: Path | str, tables: list[dict[str, Any]], **more: Any) -> SourceSection:
    raw = {"uri": str(uri), "format": "features", "id_column": "customer_id"}
    options = {"timestamp": "as_of", "tables": tables}
    return SourceSection.model_validate({**raw, "options": options, **more})


def read_all(sec: SourceSection, min_shards: int = 3) -> pa.Table:
    source = open_source(sec, min_shards=min_shards)
    plan = check_source(source, rows_per_chunk=400)
    reader = source.reader(plan.schema, plan.schema.names)
    tables = [c.table for s in plan.shards for c in reader.read(s, 400)]
    return pa.concat_tables(tables)


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Any]:
    ents = entities()
    pq.write_table(ents, tmp_path / "entities.parquet", row_group_size=500)
    spend = features(4_000, 2, "spend")
    (tmp_path / "spend").mkdir()
    pq.write_table(spend.slice(0, 2_000), tmp_path / "spend" / "a.parquet", row_group_size=300)
    pq.write_table(spend.slice(2_000), tmp_path / "spend" / "b.parquet", row_group_size=300)
    visits = features(3_000, 3, "visits", key="cid")
    pacsv.write_csv(visits, tmp_path / "visits.csv")
    clicks = features(2_500, 4, "clicks")
    with closing(duckdb.connect(str(tmp_path / "shop.duckdb"))) as conn:
        conn.register("clicks_in", clicks)
        conn.execute("CREATE TABLE clicks AS SELECT * FROM clicks_in")
    return {"entities": ents, "spend": spend, "visits": visits, "clicks": clicks}


def table_spec(uri: str, **more: Any) -> dict[str, Any]:
    return {"uri": uri, "key": "customer_id", "timestamp": "event_time", **more}


def test_several_tables_equal_the_brute_force_join(tmp_path: Path, data: dict[str, Any]) -> None:
    tables = [
        table_spec(str(tmp_path / "spend" / "*.parquet"), ttl="10d"),
        table_spec(str(tmp_path / "visits.csv"), key="cid", entity_key="customer_id"),
        table_spec(f"duckdb:///{tmp_path}/shop.duckdb", table="clicks", ttl="3d"),
    ]
    got = read_all(section(tmp_path / "entities.parquet", tables, shard_bytes=4_096))
    ents = data["entities"]
    assert got.column_names == ["customer_id", "as_of", "region", "spend", "visits", "clicks"]
    assert got.select(ents.column_names).equals(ents)  # every entity, once, in order
    spend = brute_force(ents, data["spend"].to_pylist(), "spend", 10 * DAY)
    assert got.column("spend").to_pylist() == spend
    # CSV ties: the greatest value wins (no row order to go by)
    visits = sorted(data["visits"].to_pylist(), key=lambda r: r["visits"])
    assert got.column("visits").to_pylist() == brute_force(ents, visits, "visits", None, "cid")
    clicks = brute_force(ents, data["clicks"].to_pylist(), "clicks", 3 * DAY)
    assert got.column("clicks").to_pylist() == clicks
    assert None in spend and any(v is not None for v in spend)
    no_features = pc_mask(ents, lambda c: c >= 200)
    assert all(v is None for v, m in zip(spend, no_features, strict=True) if m)


def pc_mask(ents: pa.Table, test: Any) -> list[bool]:
    return [bool(test(c)) for c in ents.column("customer_id").to_pylist()]


def test_ties_and_late_rows_in_detail(tmp_path: Path) -> None:
    ents = pa.table({"customer_id": [1, 1, 2, 3], "as_of": [T0 + 5 * DAY] * 3 + [T0]})
    pq.write_table(ents, tmp_path / "e.parquet")
    feats = pa.table(
        {
            "customer_id": [1, 1, 1, 2, 2, 3],
            "event_time": [T0 + DAY, T0 + 5 * DAY, T0 + 5 * DAY, T0 + 6 * DAY, T0, T0],
            "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "updated": [0, 9, 1, 0, 0, 0],
        }
    )
    pq.write_table(feats, tmp_path / "f.parquet")
    by_file = read_all(section(tmp_path / "e.parquet", [table_spec(str(tmp_path / "f.parquet"))]))
    assert by_file.column("x").to_pylist() == [3.0, 3.0, 5.0, 6.0]  # last of a tie; no leak
    tie_break = table_spec(str(tmp_path / "f.parquet"), tie_break="updated", ttl="4d")
    by_column = read_all(section(tmp_path / "e.parquet", [tie_break]))
    assert by_column.column("x").to_pylist() == [2.0, 2.0, None, 6.0]
    assert "updated" not in by_column.column_names  # the tie-break is not a feature


def test_a_name_clash_is_an_error_unless_full_names(tmp_path: Path, data: dict[str, Any]) -> None:
    uri = str(tmp_path / "spend" / "*.parquet")
    twice = [table_spec(uri, name="a"), table_spec(uri, name="b")]
    with pytest.raises(SpecError, match=r"tables\[1\].columns: 'spend'.*full_names"):
        open_source(section(tmp_path / "entities.parquet", twice)).plan()
    twice[1]["full_names"] = True
    got = read_all(section(tmp_path / "entities.parquet", twice))
    assert got.column_names[-2:] == ["spend", "b__spend"]
    assert got.column("spend").equals(got.column("b__spend"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"columns": ["nope"]}, r"tables\[0\].columns: .*spend.*no column 'nope'"),
        ({"timestamp": "spend"}, r"tables\[0\].timestamp: 'spend' .* is double, not a timestamp"),
        (
            {"key": "event_time", "entity_key": "customer_id"},
            r"tables\[0\].key: 'event_time' in .* is timestamp.* 'customer_id' is int64",
        ),
        ({"uri": "missing/*.parquet"}, r"no input files"),
    ],
)
def test_bad_tables_fail_the_plan_naming_the_field(
    tmp_path: Path, data: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    table = {**table_spec(str(tmp_path / "spend" / "*.parquet")), **change}
    with pytest.raises(SpecError, match=message):
        open_source(section(tmp_path / "entities.parquet", [table])).plan()


def test_the_entities_need_a_timestamp(tmp_path: Path, data: dict[str, Any]) -> None:
    sec = section(tmp_path / "entities.parquet", [table_spec(str(tmp_path / "visits.csv"))])
    sec.options["timestamp"] = "region"
    with pytest.raises(SpecError, match=r"source.options.timestamp: 'region'.* not a timestamp"):
        open_source(sec).plan()


def test_spec_errors_name_the_option() -> None:
    raw = {
        "source": {"uri": "e.parquet", "format": "features", "options": {"timestamp": "t"}},
        "model": {"kind": "sklearn", "uri": "m.skops"},
        "sink": {"uri": "out/"},
    }
    with pytest.raises(SpecError, match="tables"):
        parse_spec(raw)
    raw["source"]["options"]["tables"] = [{"uri": "f.txt", "key": "k", "timestamp": "t"}]
    with pytest.raises(SpecError, match=r"not \.parquet"):
        parse_spec(raw)
    raw["source"]["options"]["tables"] = [
        {"uri": "f.parquet", "key": "k", "timestamp": "t", "ttl": "soon"}
    ]
    with pytest.raises(SpecError, match="ttl"):
        parse_spec(raw)


def test_paths_resolve_against_the_spec_and_columns_become_inputs(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(
        """
[source]
format = "features"
uri = "data/entities.parquet"
id_column = "customer_id"
[source.options]
timestamp = "as_of"
[[source.options.tables]]
uri = "data/spend.parquet"
key = "customer_id"
timestamp = "event_time"
columns = ["spend"]
ttl = "1.5h"
[model]
kind = "sklearn"
uri = "model.skops"
[sink]
uri = "out/"
"""
    )
    spec = load_spec(tmp_path / "job.toml")
    table = spec.source.options["tables"][0]
    assert table["uri"] == str(tmp_path / "data" / "spend.parquet")
    assert spec.source.columns == ["spend"]


def test_tables_stay_under_allowed_roots(tmp_path: Path, data: dict[str, Any]) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.parquet"
    pq.write_table(data["spend"], outside)
    sec = section(
        tmp_path / "entities.parquet",
        [table_spec(str(outside))],
        allowed_roots=[str(tmp_path)],
    )
    with pytest.raises(SpecError, match="allowed"):
        open_source(sec).plan()
    outside.unlink()


@pytest.mark.parametrize("semi_join", [True, False])
def test_the_keys_semi_join_only_drops_rows_no_entity_needs(
    tmp_path: Path, data: dict[str, Any], semi_join: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The filter of feature rows to a shard's keys is taken only where its keys are
    sparse (asof._sparse); with it or without it, every entity gets the same values."""
    from thresher.sources import asof

    monkeypatch.setattr(asof, "_sparse", lambda probe, keys: semi_join)
    tables = [table_spec(str(tmp_path / "spend" / "*.parquet"), ttl="10d")]
    got = read_all(section(tmp_path / "entities.parquet", tables, shard_bytes=4_096))
    ents = data["entities"]
    assert got.column("spend").to_pylist() == brute_force(
        ents, data["spend"].to_pylist(), "spend", 10 * DAY
    )


def test_a_shard_of_keys_that_fill_their_range_reads_without_the_semi_join() -> None:
    from thresher.sources.asof import _sparse

    dense = pa.table({"__k0": pa.array([5, 6, 7, 9, 5], pa.int64())})
    sparse = pa.table({"__k0": pa.array([5, 900, 40_000], pa.int64())})
    text = pa.table({"__k0": ["a", "b"]})
    assert (_sparse(dense, 1), _sparse(sparse, 1), _sparse(text, 1)) == (False, True, True)
    assert _sparse(dense, 2)  # keys of two columns: always filtered


def test_a_delta_feature_table_at_a_pinned_version_with_its_partitions(
    tmp_path: Path, data: dict[str, Any]
) -> None:
    """A Delta table as a feature table: its files at the version read (frozen in the
    plan), a tie going to the row appended last, and a partition column (which Delta
    keeps in its log, not its files) joined like any other."""
    import time

    from deltalake import write_deltalake

    # a key's rows share a partition: a tie is within a file, or across appends
    tiers = [f"t{k % 3}" for k in data["spend"].column("customer_id").to_pylist()]
    spend = data["spend"].append_column("tier", pa.array(tiers))
    table = str(tmp_path / "spend_delta")
    write_deltalake(table, spend.slice(0, 2_000), partition_by=["tier"])
    time.sleep(0.01)  # files are ordered by their write time, in ms
    write_deltalake(table, spend.slice(2_000), partition_by=["tier"], mode="append")
    ents = data["entities"]
    rows = spend.to_pylist()  # in the order written: a later row wins a tie
    latest = table_spec(table, format="delta", ttl="10d", columns=["spend", "tier"])
    got = read_all(section(tmp_path / "entities.parquet", [latest], shard_bytes=4_096))
    assert got.column("spend").to_pylist() == brute_force(ents, rows, "spend", 10 * DAY)
    assert got.column("tier").to_pylist() == brute_force(ents, rows, "tier", 10 * DAY)

    first = table_spec(table, format="delta", version=0, ttl="10d", columns=["spend"])
    pinned = read_all(section(tmp_path / "entities.parquet", [first]))
    assert pinned.column("spend").to_pylist() == brute_force(ents, rows[:2_000], "spend", 10 * DAY)
    missing = table_spec(str(tmp_path / "no_table"), format="delta")
    with pytest.raises(SpecError, match=r"tables\[0\].uri: cannot open the Delta table"):
        open_source(section(tmp_path / "entities.parquet", [missing])).plan()
    with pytest.raises(SpecError, match="version: only"):
        parse_spec(
            {
                "source": {
                    "uri": "e.parquet",
                    "format": "features",
                    "options": {"timestamp": "t", "tables": [table_spec("f.parquet", version=1)]},
                },
                "model": {"kind": "sklearn", "uri": "m.skops"},
                "sink": {"uri": "out/"},
            }
        )


@pytest.mark.parametrize(
    ("shift", "expected"),
    [
        (dt.timedelta(0), (1_000_000, "BIGINT")),  # whole days: seconds steps
        (dt.timedelta(milliseconds=7), (1_000, "BIGINT")),
        (dt.timedelta(microseconds=3), (1, "BIGINT")),
        (dt.timedelta(days=-365 * 120, microseconds=3), (1, "HUGEINT")),  # too long a span
    ],
)
@pytest.mark.parametrize("ttl", [None, 10 * DAY, 365 * 200 * DAY])
def test_the_join_key_keeps_ties_in_file_order_in_every_form(
    tmp_path: Path, shift: dt.timedelta, expected: tuple[int, str], ttl: dt.timedelta | None
) -> None:
    """Ties (many: few distinct days) go to the last row in file order whether the join's
    key is a BIGINT of seconds, milliseconds or microseconds, or the HUGEINT one; the ttl,
    checked on that key, holds in each (a ttl longer than the table is old too)."""
    from thresher.sources.asof_order import order_key, probe_span

    ents = entities(1_500)
    spend = features(3_000, 5, "spend")
    odd = [
        t + shift if i % 3 == 0 else t for i, t in enumerate(spend.column("event_time").to_pylist())
    ]
    spend = spend.set_column(1, "event_time", pa.array(odd, pa.timestamp("us")))
    pq.write_table(ents, tmp_path / "entities.parquet")
    (tmp_path / "spend").mkdir()
    pq.write_table(spend.slice(0, 1_700), tmp_path / "spend" / "a.parquet", row_group_size=400)
    pq.write_table(spend.slice(1_700), tmp_path / "spend" / "b.parquet", row_group_size=400)
    files = f"read_parquet('{tmp_path}/spend/*.parquet', file_row_number = true)"
    with closing(duckdb.connect()) as conn:
        conn.register("probe", pa.table({"__ts": ents.column("as_of")}))
        key = order_key(conn, files, "event_time", 2, probe_span(conn, "probe"))
    assert (key.unit, key.cast) == expected
    more = {} if ttl is None else {"ttl": f"{ttl.days}d"}
    tables = [table_spec(f"{tmp_path}/spend/*.parquet", **more)]
    got = read_all(section(tmp_path / "entities.parquet", tables))
    assert got.column("spend").to_pylist() == brute_force(ents, spend.to_pylist(), "spend", ttl)


def test_a_guessed_join_key_orders_rows_and_stops_at_one_that_does_not_fit(
    tmp_path: Path,
) -> None:
    """The key guessed from the entities alone (whole seconds since a base, few enough rows
    a file) orders feature rows by time, then place; a row in other steps (milliseconds),
    before the base or past the rows a file it allows stops the query with MISFIT, after
    which the features source scans for the key (the brute-force tests above cover both)."""
    from thresher.sources.asof_order import MISFIT, guessed_key, probe_span

    day = dt.datetime(2024, 3, 1)
    with closing(duckdb.connect()) as conn:
        conn.register("probe", pa.table({"__ts": [day, day + dt.timedelta(days=9, seconds=1)]}))
        span = probe_span(conn, "probe")
        guess = guessed_key(span, 1, ttl_us=30 * 86_400 * 1_000_000)
        assert guess is not None and (guess.cast, guess.unit, guess.guessed) == (
            "BIGINT",
            1_000_000,
            True,
        )
        assert guess.base == int((day - dt.timedelta(days=30)).timestamp()) * 1_000_000

        def keys(times: list[dt.datetime | None]) -> list[int | None]:
            path = tmp_path / "f.parquet"
            pq.write_table(pa.table({"t": pa.array(times, pa.timestamp("us"))}), path)
            rows = f"read_parquet('{path}', file_row_number = true)"
            sql = f"SELECT {guess.feature('t', None)} FROM {rows}"
            return [k for (k,) in conn.execute(sql).fetchall()]

        tied = [day, day - dt.timedelta(days=2), day, None]
        got = keys(tied)
        assert got[3] is None  # a row with no time has no key, and stops nothing
        assert got[1] < got[0] < got[2]  # by time, then by place in the file
        probe_key = conn.execute(f"SELECT {guess.probe('__ts')} FROM probe").fetchall()[0][0]
        assert got[2] < probe_key  # an as-of time takes every place of its second
        for misfit in (day + dt.timedelta(milliseconds=7), day - dt.timedelta(days=31)):
            with pytest.raises(duckdb.Error, match=MISFIT):
                keys([day, misfit])
        assert guessed_key(span, 1, ttl_us=None) is not None  # 2^32 rows, 16 years back


@pytest.mark.parametrize("guess", [True, False])
def test_a_ttl_ending_inside_a_step_of_the_key_leaves_that_steps_row_out(
    tmp_path: Path, guess: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Feature rows in whole seconds, as-of times half a second past: a row exactly
    `ttl` before an as-of's second is older than the ttl by half a second (the ttl
    checked on the key rounds up to whole steps), on the guessed key or the scanned one."""
    from thresher.sources import asof

    if not guess:
        monkeypatch.setattr(asof, "guessed_key", lambda *args, **kwargs: None)
    ents = entities(1_500)
    late = [t + dt.timedelta(milliseconds=500) for t in ents.column("as_of").to_pylist()]
    ents = ents.set_column(1, "as_of", pa.array(late, pa.timestamp("us")))
    spend = features(3_000, 6, "spend")
    pq.write_table(ents, tmp_path / "entities.parquet")
    pq.write_table(spend, tmp_path / "spend.parquet", row_group_size=400)
    tables = [table_spec(f"{tmp_path}/spend.parquet", ttl="10d")]
    got = read_all(section(tmp_path / "entities.parquet", tables))
    want = brute_force(ents, spend.to_pylist(), "spend", 10 * DAY)
    assert got.column("spend").to_pylist() == want


def test_a_feature_table_rewritten_since_the_plan_fails_the_shard_naming_it(
    tmp_path: Path, data: dict[str, Any]
) -> None:
    """A resume joins the files the plan froze; one rewritten since with its feature
    column of another type fails the shard, naming the table and the column."""
    from thresher.errors import SourceError

    source = open_source(
        section(tmp_path / "entities.parquet", [table_spec(f"{tmp_path}/f.parquet")])
    )
    spend = data["spend"]
    pq.write_table(spend, tmp_path / "f.parquet")
    plan = source.plan()
    reader = source.reader(plan.schema, plan.schema.names)
    words = pa.array([f"v{i}" for i in range(spend.num_rows)])
    pq.write_table(spend.set_column(2, "spend", words), tmp_path / "f.parquet")
    with pytest.raises(SourceError, match=r"source\.options\.tables: column 'spend' of feature"):
        [chunk for shard in plan.shards for chunk in reader.read(shard, 1_000)]
