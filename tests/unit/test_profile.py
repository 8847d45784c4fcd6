"""Column profiles: exact counts (and, where the sample is every row, exact moments), the
sample's figures within their stated error, categories, segments, a JSON round trip, and a
size that does not grow with rows."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pyarrow as pa
import pytest

from thresher.profiles.profile import Profile, merge_profiles
from thresher.profiles.profiler import MAX_CATEGORIES, ShardProfiler
from thresher.profiles.sampling import sample_rate_for

CHUNK = 10_000


def profile_of(table: pa.Table, outputs: pa.Table | None = None, rate: float = 1.0,
               shards: int = 3, segment: str | None = None) -> Profile:  # fmt: skip
    """`table` profiled as `shards` shards of chunks, the shards' profiles merged."""
    outputs = outputs if outputs is not None else pa.table({})
    rows, bounds = table.num_rows, np.linspace(0, table.num_rows, shards + 1).astype(int)
    profiles = []
    for index, (start, stop) in enumerate(itertools.pairwise(bounds)):
        profiler = ShardProfiler(rate, index, segment)
        for at in range(start, stop, CHUNK):
            size = min(CHUNK, stop - at)
            inputs = table.slice(at, size)
            out = outputs.slice(at, size) if outputs.num_columns else pa.table({})
            segments = None
            if segment:
                column = inputs.column(segment)
                segments = (column, column)
            profiler.update(inputs, out, segments)
        profiles.append(profiler.profile())
    merged = merge_profiles(profiles)
    assert merged.rows == rows
    return merged


def test_counts_and_moments_are_exact_through_shards_nulls_nan_and_inf() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(5.0, 2.0, 50_000)
    x[::97] = np.nan
    x[::211] = np.inf
    x[5] = -np.inf
    mask = np.zeros(len(x), dtype=bool)
    mask[::13] = True
    column = pa.array(x, mask=mask)
    got = profile_of(pa.table({"x": column})).columns["x"]
    finite = x[~mask & np.isfinite(x)]
    assert (got.rows, got.nulls) == (len(x), int(mask.sum()))
    assert got.nan == int(np.isnan(x[~mask]).sum())
    assert got.inf == int(np.isinf(x[~mask]).sum())
    m = got.moments
    assert m.count == len(finite)
    assert (m.min, m.max) == (finite.min(), finite.max())
    assert m.mean == pytest.approx(finite.mean(), rel=1e-12)
    assert m.variance == pytest.approx(finite.var(), rel=1e-9)


def test_a_chunk_in_several_arrow_chunks_profiles_as_one() -> None:
    """A chunk read across a row group's end comes in two Arrow chunks; the profiler
    goes through them one at a time, sampling the same rows, with nulls in either."""
    rng = np.random.default_rng(4)
    x = rng.normal(0.0, 1.0, 9_000)
    mask = rng.random(len(x)) < 0.1
    whole = pa.array(x, mask=mask)
    parts = pa.chunked_array([whole.slice(0, 2_500), whole.slice(2_500, 0), whole.slice(2_500)])
    one, split = ShardProfiler(0.3, 7), ShardProfiler(0.3, 7)
    one.update(pa.table({"x": whole}), pa.table({}))
    split.update(pa.table({"x": parts}), pa.table({}))
    a, b = one.profile().columns["x"], split.profile().columns["x"]
    assert (b.rows, b.nulls, b.moments.count) == (a.rows, a.nulls, a.moments.count)
    assert b.moments.mean == pytest.approx(a.moments.mean, rel=1e-12)
    assert b.moments.variance == pytest.approx(a.moments.variance, rel=1e-9)
    assert a.quantiles is not None and b.quantiles is not None
    assert b.quantiles.n == a.quantiles.n  # the same sampled rows
    valid = np.sort(x[~mask])
    for q, found in zip([0.1, 0.5, 0.9], b.quantiles.get_quantiles([0.1, 0.5, 0.9]), strict=True):
        rank = np.searchsorted(valid, found) / len(valid)
        assert abs(rank - q) < 0.05  # the sketch's error and the 30% sample's


def test_moments_keep_their_digits_far_from_zero() -> None:
    x = 1.7e9 + np.random.default_rng(2).normal(0, 1e-2, 30_000)  # timestamps, say
    m = profile_of(pa.table({"t": x})).columns["t"].moments
    assert m.variance == pytest.approx(x.var(), rel=1e-6)


@pytest.mark.parametrize("rows", [5_000, 400_000])
def test_sketch_quantiles_are_within_their_stated_rank_error(rows: int) -> None:
    """Ranks of the sketch's quantiles in the raw data are within the KLL's normalised
    rank error plus, when sampled, the sample's DKW bound (99%)."""
    x = np.random.default_rng(3).lognormal(0.0, 1.0, rows)
    rate = sample_rate_for(rows, 65_536)
    column = profile_of(pa.table({"x": x}), rate=rate).columns["x"]
    assert column.quantiles is not None
    sampled = column.quantiles.n
    bound = column.quantiles.normalized_rank_error(False)
    if rate < 1.0:
        bound += math.sqrt(math.log(2 / 0.01) / (2 * sampled))
        assert abs(sampled - rows * rate) < 6 * math.sqrt(rows * rate)  # a Bernoulli sample
    else:
        assert sampled == rows
    ordered = np.sort(x)
    for q in np.linspace(0.01, 0.99, 25):
        value = column.quantiles.get_quantile(float(q))
        rank = np.searchsorted(ordered, value, side="right") / rows
        assert abs(rank - q) <= bound, (q, rank, bound)


def test_categories_are_counted_exactly_and_nulls_apart() -> None:
    rng = np.random.default_rng(4)
    values = rng.choice(["north", "south", "east"], 30_000, p=[0.6, 0.3, 0.1]).tolist()
    values[::50] = [None] * len(values[::50])
    column = profile_of(pa.table({"region": pa.array(values)})).columns["region"]
    want = {v: values.count(v) for v in ("north", "south", "east")}
    assert column.kind == "categorical"
    assert dict(column.top()) == want
    assert column.nulls == values.count(None)
    assert column.distinct_count == pytest.approx(3, abs=0.01)


def test_text_of_many_values_keeps_its_lengths() -> None:
    texts = [f"document number {i} " + "word " * (i % 7) for i in range(3 * MAX_CATEGORIES)]
    column = profile_of(pa.table({"text": texts}), shards=1).columns["text"]
    lengths = np.array([len(t) for t in texts], dtype=float)
    assert column.kind == "text" and column.frequent is None
    assert column.moments.mean == pytest.approx(lengths.mean())
    assert (column.moments.min, column.moments.max) == (lengths.min(), lengths.max())


def test_outputs_class_labels_and_a_probability_histogram() -> None:
    rng = np.random.default_rng(5)
    proba = rng.random(20_000)
    outputs = pa.table({"prediction": (proba > 0.7).astype(np.int64), "proba_1": proba})
    profile = profile_of(pa.table({"x": rng.random(20_000)}), outputs)
    label = profile.columns["prediction"]
    assert (label.role, label.kind) == ("output", "categorical")
    assert dict(label.top()) == {"0": int((proba <= 0.7).sum()), "1": int((proba > 0.7).sum())}
    histogram = profile.columns["proba_1"].probability
    assert histogram == np.histogram(proba, bins=20, range=(0, 1))[0].tolist()
    assert [c.name for c in profile.inputs()] == ["x"]


@pytest.mark.parametrize(
    "labels",
    [
        pa.array([-3, 7, None, 7, -3, 7] * 2_000, pa.int8()),  # nulls, negatives, int8 span
        pa.array([0, 1 << 40, 5, 1 << 40] * 3_000, pa.int64()),  # too wide: hashed
        pa.array([2**64 - 1, 2**64 - 2, 2**64 - 1] * 3_000, pa.uint64()),  # past int64
    ],
    ids=["narrow-int8-with-nulls", "wide-int64", "huge-uint64"],
)
def test_integer_class_labels_are_counted_exactly_by_either_counter(labels: pa.Array) -> None:
    outputs = pa.table({"label": labels})
    profile = profile_of(pa.table({"x": np.zeros(len(labels))}), outputs)
    values = [v for v in labels.to_pylist() if v is not None]
    assert dict(profile.columns["label"].top()) == {str(v): values.count(v) for v in set(values)}
    assert profile.columns["label"].nulls == labels.null_count


def test_a_probability_of_exactly_one_is_in_the_last_bin() -> None:
    proba = np.array([0.0, 0.05, 0.999, 1.0, 1.0, 0.5] * 100)
    outputs = pa.table({"proba_1": proba})
    histogram = profile_of(pa.table({"x": proba}), outputs).columns["proba_1"].probability
    assert histogram == np.histogram(proba, bins=20, range=(0, 1))[0].tolist()
    assert histogram is not None and histogram[-1] == 300


def test_segments_profile_each_value_apart() -> None:
    rng = np.random.default_rng(6)
    region = rng.choice(["a", "b"], 30_000)
    x = np.where(region == "a", 0.0, 10.0) + rng.normal(size=30_000)
    profile = profile_of(pa.table({"region": region, "x": x}), segment="region")
    assert sorted(profile.segments) == ["a", "b"]
    for key in ("a", "b"):
        part = profile.segments[key]
        assert part.rows == int((region == key).sum())
        assert part.columns["x"].moments.mean == pytest.approx(x[region == key].mean())


def test_a_profile_survives_json_and_its_size_does_not_grow_with_rows() -> None:
    rng = np.random.default_rng(7)

    def size(rows: int) -> int:
        table = pa.table({"x": rng.normal(size=rows), "c": rng.choice(["p", "q"], rows)})
        profile = profile_of(table, rate=sample_rate_for(rows, 20_000))
        text = json.dumps(profile.to_json())
        again = Profile.from_json(json.loads(text))
        assert again.describe() == profile.describe()
        return len(text)

    small, large = size(40_000), size(1_000_000)
    assert large < 1.3 * small, (small, large)


def test_a_chunk_read_across_a_row_groups_end_profiles_as_the_same_rows_in_one_part() -> None:
    """The two parts give what one part gives: the same counts, moments, and sampled rows
    (KLL's compactions flip coins, so two sketches of the same values agree within its
    error, not to the byte)."""
    rng = np.random.default_rng(12)
    x, y = rng.normal(2.0, 1.0, 20_000), rng.exponential(1.0, 20_000)
    whole = pa.table({"x": x, "y": y})
    parted = pa.table(
        {name: pa.chunked_array([v[:12_345], v[12_345:]]) for name, v in (("x", x), ("y", y))}
    )
    profiles = []
    for table in (whole, parted):
        profiler = ShardProfiler(0.1, 3)
        profiler.update(table, pa.table({}))
        profiles.append(profiler.profile())
    one, two = profiles
    for name in ("x", "y"):
        a, b = one.columns[name], two.columns[name]
        assert (a.rows, a.nulls, a.nan, a.inf) == (b.rows, b.nulls, b.nan, b.inf)
        assert b.moments.to_json() == pytest.approx(a.moments.to_json(), rel=1e-12)
        assert a.quantiles is not None and b.quantiles is not None
        assert (a.quantiles.n, a.quantiles.get_min_value(), a.quantiles.get_max_value()) == (
            b.quantiles.n,
            b.quantiles.get_min_value(),
            b.quantiles.get_max_value(),
        )
        for q in (0.1, 0.5, 0.9):
            assert b.quantiles.get_rank(a.quantiles.get_quantile(q)) == pytest.approx(q, abs=0.04)


def test_outputs_of_fewer_rows_than_the_inputs_are_sampled_apart() -> None:
    """Bad rows are read but not predicted: the outputs' sample is drawn from their own
    rows (a stream of its own), never past them."""
    rng = np.random.default_rng(13)
    profiler = ShardProfiler(0.05, 1)
    for _ in range(3):
        inputs = pa.table({"x": rng.normal(size=10_000)})
        outputs = pa.table({"score": rng.normal(size=9_000)})
        profiler.update(inputs, outputs)
    profile = profiler.profile()
    x, score = profile.columns["x"], profile.columns["score"]
    assert (x.rows, score.rows) == (30_000, 27_000)
    assert x.quantiles is not None and score.quantiles is not None
    # each sketch holds its own Bernoulli sample: within five standard deviations
    for sketch, rows in ((x.quantiles, 30_000), (score.quantiles, 27_000)):
        assert abs(sketch.n - rows * 0.05) < 5 * np.sqrt(rows * 0.05)


def test_a_profile_stored_with_base64_sketches_reads_as_it_did() -> None:
    """Profiles stored before sketches went as hex held them as base64 (and no
    `"sketches"` field): they read the same."""
    import base64

    rng = np.random.default_rng(14)
    outputs = pa.table({"label": rng.integers(0, 3, 5_000)})
    profile = profile_of(pa.table({"x": rng.normal(size=5_000)}), outputs, shards=1)
    data = profile.to_json()
    for column in data["columns"].values():
        assert column.pop("sketches") == "hex"
        for key in ("quantiles", "frequent", "distinct"):
            if key in column:
                column[key] = base64.b64encode(bytes.fromhex(column[key])).decode("ascii")
    again = Profile.from_json(data)
    assert again.to_json() == profile.to_json()


def test_class_labels_in_a_models_many_batches_are_counted_over_all_parts() -> None:
    rng = np.random.default_rng(15)
    labels = rng.integers(0, 4, 10_000)
    parts = pa.chunked_array([labels[i : i + 128] for i in range(0, 10_000, 128)])  # 79 parts
    profiler = ShardProfiler(1.0, 0)
    profiler.update(pa.table({"x": rng.normal(size=10_000)}), pa.table({"label": parts}))
    column = profiler.profile().columns["label"]
    assert dict(column.top()) == {str(v): int((labels == v).sum()) for v in range(4)}
    assert column.rows == 10_000
