"""The statistics of drift, computed from two profiles' sketches alone (no data re-read).

Every figure here is defined once, and the README's monitoring section states the same:

- Bins are frozen on the baseline: its quantiles at 1/bins … (bins-1)/bins (deciles by
  default), deduplicated, with open outer bins (-inf, e1) … [ek, inf); each side's share
  of a bin comes from its own KLL sketch's CDF at those edges.
- PSI = Σ (c - b) · ln(c / b) over the bins, where a share below `EPSILON` (an empty
  bin) counts as `EPSILON`, so PSI stays finite.
- Jensen-Shannon distance, base 2 (in [0, 1]): √(½ KL(b‖m) + ½ KL(c‖m)), m = (b + c) / 2,
  as `scipy.spatial.distance.jensenshannon(b, c, base=2)`.
- Wasserstein-1 between the two sketches' distributions, divided by the baseline's
  standard deviation: ∫ |F_b⁻¹(p) - F_c⁻¹(p)| dp = ∫ |F_b(x) - F_c(x)| dx, summed
  exactly over the sketches' step CDFs.
- KS = max |F_b(x) - F_c(x)| over every value either sketch retains (where the step CDFs
  jump, so the maximum is exact for the sketches). Its distance from the raw data's
  statistic is at most `ks_bound`: each sketch's normalised rank error (the KLL's 99%
  bound; 0 while it holds every value) plus, for a sketch fed a Bernoulli sample, the
  DKW bound on the sample's CDF at 99%: √(ln(2 / 0.01) / (2 n)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import datasketches as ds
import numpy as np

__all__ = [
    "EPSILON",
    "benjamini_hochberg",
    "bin_shares",
    "chi_square",
    "frozen_edges",
    "js_distance",
    "ks_bound",
    "ks_p_value",
    "ks_statistic",
    "psi",
    "wasserstein",
]

EPSILON = 1e-4  # the share an empty bin counts as in PSI
DKW_ALPHA = 0.01  # the KS bound holds with 99% confidence for each sampled sketch
KS_EXACT_SIZE = 10_000  # n·m/(n+m) above which the KS p-value is the Kolmogorov limit


def frozen_edges(baseline: ds.kll_doubles_sketch, bins: int) -> list[float]:
    """The baseline's quantiles at 1/bins … (bins-1)/bins, deduplicated, ascending."""
    ranks = [i / bins for i in range(1, bins)]
    return sorted(set(baseline.get_quantiles(ranks)))


def bin_shares(sketch: ds.kll_doubles_sketch, edges: Sequence[float]) -> np.ndarray:
    """The sketch's share of each bin (-inf, e1), [e1, e2), … [ek, inf)."""
    if not edges:
        return np.ones(1)
    cdf = sketch.get_cdf(list(edges), False)  # F(x) = share below x; the last entry is 1
    return np.diff(np.concatenate([[0.0], cdf]))


def psi(baseline: np.ndarray, current: np.ndarray) -> float:
    """Population stability index of two share vectors (see the module docstring)."""
    b, c = np.maximum(baseline, EPSILON), np.maximum(current, EPSILON)
    return float(np.sum((c - b) * np.log(c / b)))


def js_distance(baseline: np.ndarray, current: np.ndarray) -> float:
    """Jensen-Shannon distance, base 2, of two share vectors (each normalised to 1)."""
    b, c = baseline / baseline.sum(), current / current.sum()
    m = (b + c) / 2

    def kl(p: np.ndarray) -> float:
        held = p > 0
        return float(np.sum(p[held] * np.log2(p[held] / m[held])))

    return math.sqrt(max(0.0, (kl(b) + kl(c)) / 2))


def _support(*sketches: ds.kll_doubles_sketch) -> list[float]:
    """Every value the sketches retain, ascending: where their step CDFs jump."""
    return sorted({float(item) for sketch in sketches for item, _ in sketch})


def ks_statistic(baseline: ds.kll_doubles_sketch, current: ds.kll_doubles_sketch) -> float:
    points = _support(baseline, current)
    f_b = np.asarray(baseline.get_cdf(points, True)[:-1])  # F(x) = share at or below x
    f_c = np.asarray(current.get_cdf(points, True)[:-1])
    return float(np.max(np.abs(f_b - f_c)))


def wasserstein(baseline: ds.kll_doubles_sketch, current: ds.kll_doubles_sketch) -> float:
    """W1 of the sketches' distributions: ∫ |F_b - F_c| dx over their step CDFs."""
    points = _support(baseline, current)
    if len(points) < 2:
        return 0.0
    f_b = np.asarray(baseline.get_cdf(points, True)[:-1])
    f_c = np.asarray(current.get_cdf(points, True)[:-1])
    return float(np.sum(np.abs(f_b - f_c)[:-1] * np.diff(points)))


def ks_bound(sketch: ds.kll_doubles_sketch, sample_rate: float) -> float:
    """How far this sketch's CDF may be from its column's (99% confidence each term)."""
    rank_error = sketch.normalized_rank_error(True) if sketch.is_estimation_mode() else 0.0
    if sample_rate >= 1.0 or sketch.n == 0:
        return float(rank_error)
    return float(rank_error + math.sqrt(math.log(2 / DKW_ALPHA) / (2 * sketch.n)))


def ks_p_value(statistic: float, bound: float, n: int, m: int) -> float:
    """The two-sample KS p-value of samples of sizes `n` and `m`, taken at the smallest
    statistic the sketches allow (`statistic - bound`), so it is never smaller than the
    raw data's would be: a sketch's error alone cannot make a column significant. The
    asymptotic Kolmogorov distribution, as `scipy.stats.ks_2samp(method="asymp")`; past
    KS_EXACT_SIZE its limit (a thousandth apart there, and a thousand times quicker)."""
    stats = _scipy_stats()
    if not n or not m:
        return 1.0
    low, size = max(statistic - bound, 0.0), n * m / (n + m)
    if size > KS_EXACT_SIZE:
        return float(stats.kstwobign.sf(low * math.sqrt(size)))
    return float(stats.distributions.kstwo.sf(low, round(size)))


def chi_square(baseline: np.ndarray, current: np.ndarray) -> tuple[float, float]:
    """Pearson's chi-square test of homogeneity of two count vectors over the same
    categories, and its p-value. Expected counts come from the pooled shares, so a
    category seen on one side only has an expected count above 0 on both: finite."""
    table = np.vstack([baseline, current]).astype(np.float64)
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2 or not table[0].sum() or not table[1].sum():
        return 0.0, 1.0
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    statistic = float(np.sum((table - expected) ** 2 / expected))
    return statistic, float(_scipy_stats().chi2.sf(statistic, table.shape[1] - 1))


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the order given: a test is a
    discovery at false-discovery rate `fdr` when its adjusted p-value is ≤ `fdr`."""
    count = len(p_values)
    if not count:
        return []
    order = np.argsort(p_values)
    scaled = np.asarray(p_values, dtype=np.float64)[order] * count / np.arange(1, count + 1)
    adjusted = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(count)
    out[order] = np.minimum(adjusted, 1.0)
    return [float(p) for p in out]


def _scipy_stats() -> Any:
    try:
        import scipy.stats
    except ImportError as exc:  # pragma: no cover - scipy comes with the monitor extra
        raise ImportError("drift p-values need scipy: pip install 'thresher[monitor]'") from exc
    return scipy.stats
