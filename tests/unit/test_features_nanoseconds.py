"""The features source on timestamp[ns] (pandas' own unit, and pyarrow's default from
it): a feature row a few ns after an as-of time is never joined, and one a few ns past
the ttl is expired, whichever side is in ns and whichever join key is taken (guessed in
whole seconds, or scanned for)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from thresher.sources import open_source
from thresher.spec import SourceSection

T0 = 1_704_067_200 * 10**9  # 2024-01-01, ns
SECOND = 10**9
TTL = 2 * 86_400 * SECOND


def brute_force(ents: pa.Table, feats: pa.Table, ttl: int | None = TTL) -> list[Any]:
    """Each entity's value: the latest row of its key at or before its time (the last of a
    tie in file order), None if none or more than TTL older; all in integer ns."""
    rows = list(zip(feats["k"].to_pylist(), _ns(feats["t"]), feats["v"].to_pylist(), strict=True))
    got = []
    for key, as_of in zip(ents["k"].to_pylist(), _ns(ents["as_of"]), strict=True):
        best = None
        for k, t, v in rows:
            if k == key and t <= as_of and (best is None or t >= best[0]):
                best = (t, v)
        fresh = best is not None and (ttl is None or as_of - best[0] <= ttl)
        got.append(best[1] if best is not None and fresh else None)
    return got


def _ns(column: pa.ChunkedArray) -> list[int]:
    per = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[column.type.unit]
    return [int(v) * per for v in column.cast(pa.int64()).to_pylist()]


def tables(rng: np.random.Generator, whole_seconds: bool) -> tuple[pa.Table, pa.Table]:
    """300 entities of a key each, a few random feature rows, and rows a few ns either
    side of each entity's time and of its ttl: after it (never joined), and past the ttl
    (even entities) or just inside it (odd ones). In `whole_seconds`, the rows are on
    whole seconds: the as-of's second (odd) and its ttl's (even, expired by the as-of's
    fraction of a second)."""
    entities = 300
    keys = np.arange(entities)
    as_of = T0 + rng.integers(0, 6 * 86_400, entities) * SECOND + rng.integers(1, 999, entities)
    odd = keys % 2 == 1
    if whole_seconds:
        near = [np.where(odd, as_of // SECOND, (as_of - TTL) // SECOND) * SECOND]
    else:
        near = [as_of + 300, np.where(odd, as_of - TTL + 300, as_of - TTL - 300)]
    noise = T0 + rng.integers(-3 * 86_400, 6 * 86_400, 60) * SECOND
    if not whole_seconds:
        noise += rng.integers(0, 999, 60)
    times = np.concatenate([noise, *near])
    feature_keys = np.concatenate([rng.integers(0, entities, 60), *[keys] * len(near)])
    order = rng.permutation(len(times))
    feats = pa.table(
        {
            "k": feature_keys[order],
            "t": pa.array(times[order], pa.timestamp("ns")),
            "v": np.arange(len(times), dtype=np.float64),
        }
    )
    return pa.table({"k": keys, "as_of": pa.array(as_of, pa.timestamp("ns"))}), feats


def joined(root: Path, ents: pa.Table, feats: pa.Table, ttl: str | None = None) -> pa.Table:
    """The features source's rows for `ents` joined with `feats` (written as Parquet in
    `root`, each timestamp in its own unit), keyed by `k`, with `ttl`."""
    pq.write_table(ents, root / "e.parquet", coerce_timestamps=None)
    pq.write_table(feats, root / "f.parquet", row_group_size=200, coerce_timestamps=None)
    table = {"uri": str(root / "f.parquet"), "key": "k", "timestamp": "t"}
    table |= {} if ttl is None else {"ttl": ttl}
    options = {"timestamp": "as_of", "tables": [table]}
    section = {"uri": str(root / "e.parquet"), "format": "features", "options": options}
    source = open_source(SourceSection.model_validate(section))
    plan = source.plan()
    reader = source.reader(plan.schema, plan.schema.names)
    return pa.concat_tables(c.table for s in plan.shards for c in reader.read(s, 1_000))


@pytest.mark.parametrize(
    "units",  # the entities', the features', and whether the features are whole seconds
    [("ns", "ns", False), ("ns", "ns", True), ("us", "ns", False), ("ns", "us", False)],
)
@pytest.mark.parametrize("guess", [True, False])
def test_ns_times_join_exactly(
    tmp_path: Path, units: tuple[str, str, bool], guess: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    entity_unit, feature_unit, whole_seconds = units
    from thresher.sources import asof

    if not guess:
        monkeypatch.setattr(asof, "guessed_key", lambda *args, **kwargs: None)
    ents, feats = tables(np.random.default_rng(7), whole_seconds)
    # a side in µs holds its times truncated to µs, as a µs file would
    ents = ents.set_column(1, "as_of", ents["as_of"].cast(pa.timestamp(entity_unit), safe=False))
    feats = feats.set_column(1, "t", feats["t"].cast(pa.timestamp(feature_unit), safe=False))
    got = joined(tmp_path, ents, feats, ttl="2d")
    assert pq.read_schema(tmp_path / "f.parquet").field("t").type == pa.timestamp(feature_unit)
    want = brute_force(ents, feats)
    assert got["v"].to_pylist() == want
    assert sum(v is None for v in want) > 30 and sum(v is not None for v in want) > 100


def test_a_us_feature_table_with_a_date_outside_the_ns_range_joins_ns_entities(
    tmp_path: Path,
) -> None:
    """A "valid since 0001-01-01" row of a µs feature table, beside ns entities (the key
    then counts in ns): no cast to ns fails, and with no ttl every entity gets at least
    that row's value."""
    ents, feats = tables(np.random.default_rng(8), whole_seconds=False)
    feats = feats.filter(pc.less(feats["v"], 60))  # the random rows: few ids have one
    feats = feats.set_column(1, "t", feats["t"].cast(pa.timestamp("us"), safe=False))
    since = pa.table(
        {
            "k": np.arange(300),
            "t": pa.array([-62_135_596_800_000_000] * 300, pa.timestamp("us")),  # 0001-01-01
            "v": np.full(300, -1.0),
        }
    )
    feats = pa.concat_tables([since, feats])
    got = joined(tmp_path, ents, feats)
    assert got["v"].to_pylist() == brute_force(ents, feats, ttl=None)
    assert -1.0 in got["v"].to_pylist()  # some entity has only the old row
