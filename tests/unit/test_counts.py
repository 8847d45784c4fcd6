"""The profiler's native counts (`thresher.monitor.kernels`): class labels, the same counts
as numpy's bincount, and None (the caller's general path) for any label it does not take;
a probability column's histogram and moments in one pass, as numpy finds them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from thresher.moments import reductions
from thresher.monitor.kernels import SMALL_LABELS, probability_pass, small_counts

pytestmark = pytest.mark.unit


def labels(*parts: np.ndarray) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(part) for part in parts])


def test_nulls_and_a_parts_offset_are_left_out_of_the_count() -> None:
    part = pa.array([1, None, 2, 2, None, 0, 1], type=pa.int64())
    values = pa.chunked_array([part.slice(1), pa.array([], pa.int64()), part.slice(5, 2)])
    counts = small_counts(values)  # [2, 2, 0, 1] counted, then [0, 1] at an offset of 5
    assert counts is not None
    np.testing.assert_array_equal(counts[:3], [2, 2, 2])
    assert counts[3:].sum() == 0


def test_labels_are_counted_over_the_parts_as_bincount_counts_them() -> None:
    rng = np.random.default_rng(7)
    parts = [rng.integers(0, 5, size=n) for n in (0, 1, 7, 8, 9, 16_385)]
    parts.append(np.sort(rng.integers(0, SMALL_LABELS, size=10_000)))  # long runs
    parts += [rng.integers(0, 2, size=5_001), np.zeros(3, dtype=np.int64)]  # two labels, one
    counts = small_counts(labels(*parts))
    assert counts is not None
    expected = np.bincount(np.concatenate(parts), minlength=SMALL_LABELS)
    np.testing.assert_array_equal(counts, expected)


@pytest.mark.parametrize("bad", [-1, SMALL_LABELS, 2**62])
def test_a_label_outside_the_range_gives_up_whole(bad: int) -> None:
    values = np.zeros(100, dtype=np.int64)
    values[57] = bad
    assert small_counts(labels(np.ones(10, dtype=np.int64), values)) is None


def test_other_integer_types_are_left_to_the_general_path() -> None:
    assert small_counts(labels(np.ones(10, dtype=np.int32))) is None


def test_each_count_starts_from_nothing_after_a_wide_one_or_one_given_up() -> None:
    """The kernel keeps its tables between calls, cleared as far as each call used them."""
    wide = np.arange(SMALL_LABELS, dtype=np.int64)
    assert small_counts(labels(wide)) is not None
    given_up = np.array([3, 3, 900, SMALL_LABELS, 5], dtype=np.int64)
    assert small_counts(labels(given_up)) is None
    narrow = np.array([0, 1, 1, 2, 2, 2], dtype=np.int64)
    counts = small_counts(labels(narrow))
    assert counts is not None
    np.testing.assert_array_equal(counts, np.bincount(narrow, minlength=SMALL_LABELS))


@pytest.mark.parametrize("bins", [1, 20, 256])
def test_a_probability_pass_bins_and_sums_as_numpy(bins: int) -> None:
    rng = np.random.default_rng(11)
    scores = np.concatenate([rng.random(9_999), [0.0, 1.0, 1.0], np.full(500, 0.999)])
    found = probability_pass(scores, bins)
    if found is None:
        pytest.skip("no C compiler here")
    sums, counts = found
    expected = np.histogram(scores, bins=bins, range=(0, 1))[0]
    np.testing.assert_array_equal(counts, expected)
    assert sums == pytest.approx(reductions(scores), rel=1e-12)


def test_a_probability_pass_leaves_nan_and_strays_out_of_every_bin() -> None:
    scores = np.array([0.25, np.nan, -0.5, 1.5, np.inf, 0.75])
    found = probability_pass(scores, 2)
    if found is None:
        pytest.skip("no C compiler here")
    sums, counts = found
    assert counts.tolist() == [1, 1]
    assert np.isnan(sums[0]) and (sums[2], sums[3]) == (-0.5, np.inf)
