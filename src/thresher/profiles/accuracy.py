"""How far each figure of a column's profile may be from the column's own: exact, or an
estimate with its error at 99% confidence (alpha = 0.01).

What is exact: `rows` and `nulls` (Arrow's metadata of every chunk), and an output's class
counts while the frequent-items sketch holds every value. The rest comes from a uniform
Bernoulli sample of the rows (`profiles.sampling`), so it is exact where the sample was
every row, else:

- nan and inf (of floats; other types hold neither, exactly): their share of the non-null
  values within Hoeffding's √(ln(2/alpha)/2n) of n sampled values, and the count of finite
  values they leave within that share of the non-null values;

- mean: ± z·s/√n·√(1 - n/N), the sample mean's normal interval (n sampled of N values);
- std: ± z·s/√(2n)·√(1 - n/N), its normal-theory interval (for data far from normal,
  heavy tails above all, the true error is larger);
- min, max: the sample's, so inside the true range; at most ln(1/alpha)/n of the values lie
  beyond each (`rank_error`);
- quantiles: within the KLL sketch's normalised rank error plus the DKW bound
  √(ln(2/alpha)/2n) of their rank;
- a histogram's or a category's share: within twice the DKW bound (a bin is the
  difference of two CDF values), plus the frequent-items sketch's own error;
- distinct: HLL's relative error (three standard deviations) of the values sampled: a
  lower bound of the column's where the sample was not every value.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import datasketches as ds

__all__ = ["ALPHA", "Z", "column_errors", "dkw"]

ALPHA = 0.01  # every stated error holds with 99% confidence
Z = 2.5758  # the normal quantile of 1 - ALPHA / 2
HLL_DEVIATIONS = 3  # HLL's error as three standard deviations (99.7%)


class _Moments(Protocol):
    count: int

    @property
    def std(self) -> float: ...


class Profiled(Protocol):
    """What `column_errors` reads of a column (`profiles.profile.ColumnProfile`)."""

    rows: int
    nulls: int
    scanned: int
    counted: int
    quantiles: ds.kll_doubles_sketch | None
    frequent: ds.frequent_strings_sketch | None
    distinct: ds.hll_sketch | None
    probability: list[int] | None

    @property
    def moments(self) -> _Moments: ...

    @property
    def population(self) -> int: ...

    @property
    def nan_exact(self) -> bool: ...


def dkw(n: int) -> float:
    """The DKW bound: how far a sample of `n` values' CDF may be from its population's."""
    return math.sqrt(math.log(2 / ALPHA) / (2 * n)) if n else 1.0


def column_errors(column: Profiled, of: str = "") -> dict[str, Any]:
    """Each figure `ColumnProfile.describe` shows, by its key (`of`: "length_" where the
    figures are of text's lengths): "exact", or its error."""
    errors: dict[str, Any] = dict.fromkeys(("rows", "nulls", "nan", "inf", "count"), "exact")
    if not column.nan_exact:
        share = dkw(column.scanned)  # Hoeffding's bound on one share: DKW's at one point
        errors |= dict.fromkeys(("nan", "inf"), _share(share))
        errors["count"] = _plus_minus(share * (column.rows - column.nulls))
    errors |= _moment_errors(column.moments, column.population, of)
    if column.quantiles is not None and not column.quantiles.is_empty():
        rank = column.quantiles.normalized_rank_error(False)
        if column.moments.count < column.population:
            rank += dkw(column.quantiles.n)
        errors["quantiles"] = {"rank_error": rank, "confidence": 1 - ALPHA}
    if column.frequent is not None:
        errors |= _count_errors(column)
    if column.probability is not None:
        seen = sum(column.probability)
        errors["probability_histogram"] = (
            "exact" if seen >= column.population else _share(2 * dkw(seen))
        )
    return errors


def _moment_errors(moments: _Moments, population: int, of: str) -> dict[str, Any]:
    n = moments.count
    if not n:
        return {}
    keys = [f"{of}{figure}" for figure in ("min", "max", "mean", "std")]
    if n >= population:  # the sample was every value
        return dict.fromkeys(keys, "exact")
    shrink = math.sqrt(1 - n / population)  # a sample of a finite population
    std = moments.std
    extreme = {"rank_error": math.log(1 / ALPHA) / n, "confidence": 1 - ALPHA}
    return {
        keys[0]: extreme,
        keys[1]: extreme,
        keys[2]: _plus_minus(Z * std / math.sqrt(n) * shrink),
        keys[3]: _plus_minus(Z * std / math.sqrt(2 * n) * shrink) | {"assumes": "normal"},
    }


def _count_errors(column: Profiled) -> dict[str, Any]:
    """The top values' shares and the distinct count."""
    frequent, counted = column.frequent, column.counted
    assert frequent is not None
    whole = counted >= column.rows - column.nulls  # every value counted, not a sample
    sketch = 0.0  # the frequent-items sketch's own error, past 768 values
    if not frequent.is_empty() and counted:
        items = frequent.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_NEGATIVES)
        sketch = max(upper - lower for _, _, lower, upper in items) / counted
    errors: dict[str, Any] = {}
    if whole and not sketch:
        errors["top"] = "exact"
    else:
        errors["top"] = _share(sketch + (0.0 if whole else 2 * dkw(counted)))
    if column.distinct is not None:
        relative = column.distinct.get_rel_err(
            True, True, column.distinct.lg_config_k, HLL_DEVIATIONS
        )
        errors["distinct"] = {"relative_error": relative, "confidence": 0.997}
        if not whole:
            errors["distinct"]["of"] = "the sampled values: a lower bound of the column's"
    return errors


def _plus_minus(error: float) -> dict[str, Any]:
    return {"plus_minus": error, "confidence": 1 - ALPHA}


def _share(error: float) -> dict[str, Any]:
    return {"share_error": error, "confidence": 1 - ALPHA}
