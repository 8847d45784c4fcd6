"""The rows a profile's sketches see (`thresher.monitor.sampling`): one Bernoulli stream
over a shard's rows, whatever its chunks, seeded by the shard."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from thresher.monitor.sampling import RowSample, sample_rate_for

pytestmark = pytest.mark.unit


def kept(sample: RowSample, chunks: list[int]) -> np.ndarray:
    """The positions kept, over all the chunks, counted from the first row."""
    found, start = [], 0
    for rows in chunks:
        taken = sample.take(rows)
        assert taken is not None
        assert np.all(np.diff(taken) > 0) and (not len(taken) or 0 <= taken[0] <= taken[-1] < rows)
        found.append(taken + start)
        start += rows
    return np.concatenate(found)


def test_the_rows_kept_are_the_same_however_the_rows_come() -> None:
    whole = kept(RowSample(0.01, seed=3), [200_000])
    chunked = kept(RowSample(0.01, seed=3), [65_536, 1, 0, 70_000, 64_463])
    np.testing.assert_array_equal(whole, chunked)
    assert not np.array_equal(whole, kept(RowSample(0.01, seed=4), [200_000]))


@pytest.mark.parametrize("rate", [0.001, 0.3, 0.9])
def test_each_row_is_kept_with_the_rate_independently(rate: float) -> None:
    rows = 400_000
    positions = kept(RowSample(rate, seed=1), [rows // 7] * 7)
    count = len(positions)
    # the count is binomial: within five standard deviations of its mean
    assert abs(count - rows // 7 * 7 * rate) < 5 * np.sqrt(rows * rate * (1 - rate))
    # and the kept rows spread uniformly over the rows (KS against the uniform)
    assert stats.kstest(positions / rows, "uniform").pvalue > 1e-4


def test_a_rate_of_one_keeps_every_row() -> None:
    assert RowSample(1.0, seed=0).take(10) is None
    assert sample_rate_for(1_000, 32_768) == 1.0
    assert sample_rate_for(None, 32_768) == 1.0
    assert sample_rate_for(1_000_000, 0) == 1.0
    assert sample_rate_for(1_000_000, 32_768) == pytest.approx(0.032768)
