"""Class labels counted natively (`thresher.monitor.kernels`): the same counts as numpy's
bincount, and None (the caller's general path) for any label it does not take."""

from __future__ import annotations

import numpy as np
import pytest

from thresher.monitor.kernels import SMALL_LABELS, small_counts

pytestmark = pytest.mark.unit


def test_labels_are_counted_over_the_parts_as_bincount_counts_them() -> None:
    rng = np.random.default_rng(7)
    parts = [rng.integers(0, 5, size=n) for n in (0, 1, 7, 8, 9, 16_385)]
    parts.append(np.sort(rng.integers(0, SMALL_LABELS, size=10_000)))  # long runs
    counts = small_counts(parts)
    assert counts is not None
    expected = np.bincount(np.concatenate(parts), minlength=SMALL_LABELS)
    np.testing.assert_array_equal(counts, expected)


@pytest.mark.parametrize("bad", [-1, SMALL_LABELS, 2**62])
def test_a_label_outside_the_range_gives_up_whole(bad: int) -> None:
    values = np.zeros(100, dtype=np.int64)
    values[57] = bad
    assert small_counts([np.ones(10, dtype=np.int64), values]) is None


def test_other_integer_types_are_left_to_the_general_path() -> None:
    assert small_counts([np.ones(10, dtype=np.int32)]) is None
