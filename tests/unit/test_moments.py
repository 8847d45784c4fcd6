"""Moments taken as a model reads its inputs: `to_matrix`'s native copy, what a profiling
worker records of it, and when the profiler may use the record instead of reading."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from thresher import moments
from thresher.models.features import to_matrix
from thresher.monitor.kernels import gather
from thresher.monitor.profiler import ShardProfiler
from thresher.seen import Seen, address, addresses

needs_kernel = pytest.mark.skipif(moments._kernels() is None, reason="no C compiler here")


def numpy_matrix(table: pa.Table, dtype: type) -> np.ndarray:
    """What to_matrix must give, through pyarrow and numpy alone."""
    columns = [c.to_numpy(zero_copy_only=False).astype(np.float64) for c in table.columns]
    return np.column_stack(columns).astype(dtype) if columns else np.empty((0, 0), dtype)


def mixed_table(rows: int = 3_001) -> pa.Table:
    rng = np.random.default_rng(0)
    x = rng.normal(size=rows)
    return pa.table(
        {
            "plain": x,
            "split": pa.chunked_array([x[:1000] * 2, x[1000:1000], x[1000:] * 2]),
            "nulls": pa.array(x * 3, mask=rng.random(rows) < 0.1),
            "ints": pa.array(rng.integers(-5, 5, rows)),
            "flags": pa.array(rng.random(rows) < 0.5),
            "singles": pa.array(x.astype(np.float32)),
        }
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel", ["native", "numpy"])
def test_to_matrix_is_the_same_natively_or_not(
    dtype: type, kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kernel == "numpy":
        monkeypatch.setattr(moments, "_kernels", lambda: None)
    elif moments._kernels() is None:
        pytest.skip("no C compiler here")
    table = mixed_table()
    for batch in (table, table.slice(7, 2_000), table.slice(2_990)):
        got = to_matrix(batch, dtype)
        assert got.dtype == dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, numpy_matrix(batch, dtype))


@needs_kernel
def test_batches_recorded_tile_the_chunk_and_give_its_moments() -> None:
    x = np.random.default_rng(1).normal(3.0, 2.0, 10_000)
    chunk = pa.table({"x": x, "y": -x})
    with moments.recording() as seen:
        for start in range(0, 10_000, 4_096):  # the tuner's batches, the last one short
            to_matrix(chunk.slice(start, 4_096), np.float32)
    assert seen is not None
    total, squares, low, high = seen.sums_of(chunk.column("x").chunk(0)) or (0, 0, 0, 0)
    assert total == pytest.approx(x.sum(), rel=1e-12)
    assert squares == pytest.approx((x * x).sum(), rel=1e-12)
    assert (low, high) == (x.min(), x.max())
    assert seen.sums_of(chunk.column("y").chunk(0)) is not None
    assert seen.sums_of(chunk.slice(100, 5_000).column("x").chunk(0)) is None  # not a tiling
    # one batch of the chain: its moments went into the chain's, so it is not found
    assert seen.sums_of(chunk.slice(0, 4_096).column("x").chunk(0)) is None


@needs_kernel
def test_a_chunk_read_across_a_row_groups_end_is_found_part_by_part() -> None:
    x = np.random.default_rng(2).normal(size=10_000)
    column = pa.chunked_array([x[:6_000], x[6_000:]])  # the parts' buffers lie apart
    chunk = pa.table({"x": column, "y": pa.chunked_array([-x[:6_000], -x[6_000:]])})
    with moments.recording() as seen:
        for start in range(0, 10_000, 4_096):  # the second batch straddles the parts
            to_matrix(chunk.slice(start, 4_096), np.float64)
    assert seen is not None
    for part, values in zip(column.chunks, (x[:6_000], x[6_000:]), strict=True):
        assert seen.sums_of(part) == pytest.approx(
            (values.sum(), (values * values).sum(), values.min(), values.max()), rel=1e-12
        )


@needs_kernel
def test_a_chunks_columns_in_the_chains_order_are_found_at_once() -> None:
    rng = np.random.default_rng(4)
    chunk = pa.table({f"c{i}": rng.normal(i, 1.0, 10_000) for i in range(3)})
    with moments.recording() as seen:
        for start in range(0, 10_000, 4_096):
            to_matrix(chunk.slice(start, 4_096), np.float32)
    assert seen is not None
    arrays = [c.chunk(0) for c in chunk.columns]
    at = addresses(arrays)
    found = seen.chain_sums(at, 10_000)
    assert found is not None
    np.testing.assert_array_equal(found, np.array(seen.sums_at(at, 10_000)))
    assert seen.chain_sums(at[::-1], 10_000) is None  # not the chain's order: one by one
    assert seen.chain_sums(at[:2], 10_000) is None  # not all its columns
    assert seen.chain_sums(at, 4_096) is None  # not all its rows
    assert Seen().chain_sums(at, 10_000) is None  # nothing recorded


@needs_kernel
def test_rows_converted_twice_or_not_at_all_are_not_taken_from_the_record() -> None:
    x = np.arange(8_000, dtype=np.float64)
    column = pa.array(x)
    with moments.recording() as seen:
        to_matrix(pa.table({"x": column.slice(0, 4_000)}))  # the second half never converted
    assert seen is not None and seen.sums_of(column) is None
    whole = (x.sum(), (x * x).sum(), 0.0, 7_999.0)
    with moments.recording() as seen:  # a batch that failed, retried in halves: the halves
        to_matrix(pa.table({"x": column}))  # make one run, the same as the batch's
        to_matrix(pa.table({"x": column.slice(0, 4_000)}))
        to_matrix(pa.table({"x": column.slice(4_000)}))
    assert seen is not None and seen.sums_of(column) == whole
    with moments.recording() as seen:  # and a half that failed too, retried in quarters
        to_matrix(pa.table({"x": column}))
        to_matrix(pa.table({"x": column.slice(0, 4_000)}))
        to_matrix(pa.table({"x": column.slice(4_000)}))
        to_matrix(pa.table({"x": column.slice(4_000, 2_000)}))
        to_matrix(pa.table({"x": column.slice(6_000)}))
    assert seen is not None and seen.sums_of(column) is None  # runs that overlap: unclear
    with moments.recording() as seen:  # the same rows twice: the same sums, kept once
        to_matrix(pa.table({"x": column}))
        to_matrix(pa.table({"x": column}))
    assert seen is not None and seen.sums_of(column) == whole


@needs_kernel
def test_a_copy_of_the_values_is_not_mistaken_for_them() -> None:
    """A model that converts a table of its own (scaled, say) records other buffers."""
    column = pa.array(np.linspace(0.0, 1.0, 5_000))
    with moments.recording() as seen:
        to_matrix(pa.table({"x": pa.array(column.to_numpy() * 10)}))
    assert seen is not None and seen.sums_of(column) is None


def test_an_empty_run_says_nothing() -> None:
    column = pa.array(np.ones(10))
    seen = Seen()
    seen.add([address(column)], 0, np.zeros((1, 4)))
    assert seen.sums_of(column) is None


def test_nothing_is_recorded_unless_asked() -> None:
    with moments.recording(enabled=False) as seen:
        to_matrix(pa.table({"x": np.ones(100)}))
    assert seen is None
    assert moments.reducing() is None


@needs_kernel
def test_the_profile_is_the_same_from_the_record_or_from_the_values() -> None:
    """Counts, nan and inf exact, moments to the last digits, sampled rows the same."""
    rng = np.random.default_rng(2)
    x = rng.normal(-1.0, 4.0, 20_000)
    x[::333] = np.nan  # a column whose recorded sums are nan: read again, counted apart
    chunk = pa.table({"x": x, "y": rng.lognormal(size=20_000)})
    recorded, read = ShardProfiler(0.1, 3), ShardProfiler(0.1, 3)
    with moments.recording() as seen:
        for start in range(0, 20_000, 3_000):
            to_matrix(chunk.slice(start, 3_000))
    recorded.update(chunk, pa.table({}), None, seen)
    read.update(chunk, pa.table({}))
    for name in ("x", "y"):
        a, b = recorded.profile().columns[name], read.profile().columns[name]
        assert (a.rows, a.nulls, a.nan, a.inf) == (b.rows, b.nulls, b.nan, b.inf)
        assert (a.moments.count, a.moments.min, a.moments.max) == (
            b.moments.count,
            b.moments.min,
            b.moments.max,
        )
        assert a.moments.mean == pytest.approx(b.moments.mean, rel=1e-12)
        assert a.moments.m2 == pytest.approx(b.moments.m2, rel=1e-9)
        assert a.quantiles is not None and b.quantiles is not None
        assert a.quantiles.n == b.quantiles.n


@needs_kernel
def test_the_moments_of_many_columns_are_found_at_once_as_one_at_a_time() -> None:
    """`sums_of_all` answers for every array what `sums_of` answers for each: tiled
    columns their sums, the rest (a slice, a copy, one converted in part) None."""
    rng = np.random.default_rng(6)
    chunk = pa.table({f"c{i}": rng.normal(i, 1.0 + i, 9_000) for i in range(5)})
    with moments.recording() as seen:
        for start in range(0, 9_000, 2_500):
            to_matrix(chunk.slice(start, 2_500).select(["c0", "c1", "c2"]))
        to_matrix(chunk.slice(0, 4_000).select(["c3"]))
    assert seen is not None
    arrays = [chunk.column(name).chunk(0) for name in chunk.column_names]
    arrays += [arrays[1].slice(10, 100), pa.array(arrays[0].to_numpy() * 2), arrays[2]]
    together = seen.sums_of_all(arrays)
    assert together == [seen.sums_of(a) for a in arrays]
    assert [found is not None for found in together] == [1, 1, 1, 0, 0, 0, 0, 1]
    x = chunk.column("c1").to_numpy()
    total, squares, low, high = together[1] or (0, 0, 0, 0)
    assert total == pytest.approx(x.sum(), rel=1e-12)
    assert squares == pytest.approx((x * x).sum(), rel=1e-12)
    assert (low, high) == (x.min(), x.max())


def test_running_moments_merge_as_moments_merge_one_column_at_a_time() -> None:
    from thresher.monitor.profile import Moments
    from thresher.monitor.running import RunningMoments

    rng = np.random.default_rng(7)
    running, one_by_one = RunningMoments(), {"a": Moments(), "b": Moments()}
    for names in [("a", "b"), ("b",), ("a", "b"), ("b", "a")]:
        parts = {name: rng.normal(5.0, 3.0, int(rng.integers(1, 500))) for name in names}
        rows = min(len(p) for p in parts.values())
        found = {name: p[:rows] for name, p in parts.items()}
        mean = np.array([found[n].mean() for n in names])
        m2 = np.array([found[n].var() * rows for n in names])
        low = np.array([found[n].min() for n in names])
        high = np.array([found[n].max() for n in names])
        running.merge(names, rows, mean=mean, m2=m2, low=low, high=high)
        for i, name in enumerate(names):
            one_by_one[name].merge(Moments(rows, low[i], high[i], mean[i], m2[i]))
    for name, moments_of in running.folded():
        want = one_by_one[name]
        assert (moments_of.count, moments_of.min, moments_of.max) == (
            want.count,
            want.min,
            want.max,
        )
        assert moments_of.mean == pytest.approx(want.mean, rel=1e-14)
        assert moments_of.m2 == pytest.approx(want.m2, rel=1e-12)


@pytest.mark.parametrize("kernel", ["native", "numpy"])
def test_a_fold_merges_what_it_can_and_leaves_nan_and_cancellation(
    kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from thresher.monitor import kernels
    from thresher.monitor.profile import Moments
    from thresher.monitor.running import RunningMoments

    if kernel == "numpy":
        monkeypatch.setattr(kernels, "_kernel", lambda: None)
    elif kernels._kernel() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(8)
    running, expected = RunningMoments(), {n: Moments() for n in "abcd"}
    for _ in range(3):
        chunk = {
            "a": rng.normal(5.0, 3.0, 1_000),
            "b": rng.normal(-1.0, 0.5, 1_000),
            "c": np.append(rng.normal(size=999), np.nan),  # left: the way of any column
            "d": 1e9 + rng.normal(0.0, 1e-4, 1_000),  # left: Σx² - Σx·mean cancels
        }
        sums = np.array([moments.reductions(v) for v in chunk.values()])
        assert running.fold(tuple(chunk), 1_000, sums) == [2, 3]
        for name in "ab":
            v = chunk[name]
            expected[name].merge(Moments(1_000, v.min(), v.max(), v.mean(), v.var() * 1_000))
    folded = dict(running.folded())
    assert sorted(folded) == ["a", "b", "c", "d"] and folded["c"].count == folded["d"].count == 0
    for name in "ab":
        got, want = folded[name], expected[name]
        assert (got.count, got.min, got.max) == (want.count, want.min, want.max)
        assert got.mean == pytest.approx(want.mean, rel=1e-12)
        assert got.m2 == pytest.approx(want.m2, rel=1e-9)


def test_runs_of_no_columns_say_nothing() -> None:
    """A model of no features records calls with no runs."""
    seen = Seen()
    seen.add([], 100, np.zeros((0, 4)))
    assert seen.sums_of_all([pa.array(np.ones(100))]) == [None]


def test_a_sample_is_gathered_from_many_columns_at_once_as_take_would() -> None:
    rng = np.random.default_rng(3)
    whole = [pa.array(rng.normal(size=1_000)) for _ in range(3)]
    arrays = [whole[0], whole[1].slice(100, 700), whole[2].slice(300)]  # offsets count
    positions = np.array([0, 5, 6, 250, 699])
    block = gather(arrays, addresses(arrays), positions)
    expected = [a.to_numpy()[positions] for a in arrays]
    np.testing.assert_array_equal(block, np.array(expected))
