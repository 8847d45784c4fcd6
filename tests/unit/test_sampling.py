"""The rows a profile's sketches see (`thresher.profiles.sampling`): one Bernoulli stream
over a shard's rows, whatever its chunks, seeded by the shard."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from thresher.profiles.sampling import RowSample, sample_rate_for, uniforms

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


def splitmix64(key: int, count: int) -> list[int]:
    """SplitMix64 as its authors wrote it, in plain integers modulo 2**64."""
    mask, out = (1 << 64) - 1, []
    for i in range(1, count + 1):
        z = (key + i * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append(z ^ (z >> 31))
    return out


def test_the_uniforms_are_splitmix64s_top_bits_and_any_stretch_draws_alone() -> None:
    key = 0xDEADBEEF12345678
    expected = [((z >> 11) + 0.5) / 2**53 for z in splitmix64(key, 50)]
    np.testing.assert_array_equal(uniforms(np.uint64(key), 0, 50), expected)
    np.testing.assert_array_equal(uniforms(np.uint64(key), 20, 30), expected[20:])
    many = uniforms(np.uint64(7), 0, 200_000)
    assert many.min() > 0.0 and many.max() < 1.0
    assert stats.kstest(many, "uniform").pvalue > 1e-4


def test_sampling_leaves_numpys_generators_unimported() -> None:
    # numpy.random's import cost a worker more than sampling a whole job (see sampling.py)
    code = (
        "import sys; from thresher.profiles.sampling import RowSample; "
        "RowSample(0.01, 1).take(100_000); print('numpy.random' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
