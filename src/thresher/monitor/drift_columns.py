"""One column of two profiles compared: numbers and text lengths on the baseline's frozen
quantile bins, categories on their shares (the figures are defined in `drift_stats`).

The verdict is set later (`judge`), once the p-values of every column are adjusted."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Literal

import datasketches as ds
import numpy as np

import thresher.monitor.drift_stats as st
from thresher.monitor.drift_report import Change, ColumnDrift, Share, Thresholds, Verdict
from thresher.profiles.profile import ColumnProfile

__all__ = ["bin_labels", "category_counts", "compare_column", "judge"]

MAX_CATEGORIES = 50  # categories listed by pooled count; the rest are one OTHER
OTHER = "(other)"


def compare_column(
    baseline: ColumnProfile, current: ColumnProfile, bins: int, rates: tuple[float, float]
) -> ColumnDrift:
    """The figures of one column common to both profiles (`rates`: each profile's
    sample rate, for the KS bound)."""
    base = ColumnDrift(
        name=current.name,
        role=current.role,
        kind=current.kind,
        measure=None,
        verdict="ok",
        rows=Change(baseline.rows, current.rows),
        null_share=Change(_share(baseline.nulls, baseline), _share(current.nulls, current)),
        nan_share=Change(_share(baseline.nan, baseline), _share(current.nan, current)),
    )
    kinds = {baseline.kind, current.kind}
    if kinds == {"categorical"}:
        return _categorical(base, baseline, current)
    if kinds == {"numeric"}:
        return _numbers(base, baseline, current, bins, rates, measure="values")
    lengths = baseline.quantiles is not None and current.quantiles is not None
    if "text" in kinds and kinds <= {"text", "categorical"} and lengths:
        text = replace(base, kind="text")
        return _numbers(text, baseline, current, bins, rates, measure="lengths")
    if kinds == {"other"}:
        return replace(base, note="not profiled beyond nulls (neither number nor text)")
    kind_change = f"{baseline.kind} → {current.kind}"
    return replace(base, verdict="drift", note=f"kind changed: {kind_change}")


def judge(column: ColumnDrift, thresholds: Thresholds) -> ColumnDrift:
    """The column's verdict by its PSI; a column with values on one side only drifts."""
    if column.psi is None:
        return column
    verdict: Verdict = "ok"
    if column.psi >= thresholds.psi_drift:
        verdict = "drift"
    elif column.psi >= thresholds.psi_warn:
        verdict = "warn"
    return replace(column, verdict=verdict)


def _share(part: int, column: ColumnProfile) -> float:
    return part / column.rows if column.rows else 0.0


def _numbers(
    base: ColumnDrift,
    baseline: ColumnProfile,
    current: ColumnProfile,
    bins: int,
    rates: tuple[float, float],
    *,
    measure: Literal["values", "lengths"],
) -> ColumnDrift:
    b, c = baseline.quantiles, current.quantiles
    base = replace(base, measure=measure)
    if b is None or c is None or b.is_empty() or c.is_empty():
        return _one_side_empty(base, b is None or b.is_empty(), c is None or c.is_empty())
    edges = st.frozen_edges(b, bins)
    shares_b, shares_c = st.bin_shares(b, edges), st.bin_shares(c, edges)
    ks = st.ks_statistic(b, c)
    bound = st.ks_bound(b, rates[0]) + st.ks_bound(c, rates[1])
    std = baseline.moments.std
    return replace(
        base,
        psi=st.psi(shares_b, shares_c),
        js=st.js_distance(shares_b, shares_c),
        wasserstein=st.wasserstein(b, c) / std if std > 0 else None,
        ks=ks,
        ks_bound=bound,
        test="ks",
        p_value=st.ks_p_value(ks, bound, b.n, c.n),
        edges=tuple(edges),
        shares=tuple(
            Share(label, float(x), float(y))
            for label, x, y in zip(bin_labels(edges), shares_b, shares_c, strict=True)
        ),
        note=None if std > 0 else "baseline is constant: no Wasserstein normalised by its std",
    )


def _one_side_empty(base: ColumnDrift, baseline_empty: bool, current_empty: bool) -> ColumnDrift:
    if baseline_empty and current_empty:
        return replace(base, note="no values on either side")
    side = "baseline" if baseline_empty else "current"
    return replace(base, verdict="drift", note=f"no values in the {side}")


def bin_labels(edges: list[float]) -> list[str]:
    if not edges:
        return ["all"]
    inner = [f"[{a:.4g}, {b:.4g})" for a, b in pairwise(edges)]
    return [f"< {edges[0]:.4g}", *inner, f">= {edges[-1]:.4g}"]


def category_counts(column: ColumnProfile) -> dict[str, float]:
    """Each value's count among the values counted (every value of an output; the sample's
    of an input, so a test's counts are the sample's, not scaled up): exact while the
    sketch holds every value (up to 768), and the values it no longer tells apart as
    OTHER."""
    sketch = column.frequent
    counts: dict[str, float] = {}
    if sketch is not None and not sketch.is_empty():
        items = sketch.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_NEGATIVES)
        counts = {str(item): float(estimate) for item, estimate, *_ in items}
    rest = column.counted - sum(counts.values())
    if rest > 0:
        counts[OTHER] = counts.get(OTHER, 0.0) + rest
    return counts


def _category_table(
    baseline: ColumnProfile, current: ColumnProfile
) -> tuple[dict[str, float], dict[str, float]]:
    counts_b, counts_c = category_counts(baseline), category_counts(current)
    pooled = {k: counts_b.get(k, 0.0) + counts_c.get(k, 0.0) for k in counts_b | counts_c}
    ranked = sorted((k for k in pooled if k != OTHER), key=lambda k: (-pooled[k], k))
    kept = ranked[:MAX_CATEGORIES]
    table_b = {k: counts_b.get(k, 0.0) for k in kept}
    table_c = {k: counts_c.get(k, 0.0) for k in kept}
    rest_b = sum(counts_b.values()) - sum(table_b.values())
    rest_c = sum(counts_c.values()) - sum(table_c.values())
    if rest_b > 0 or rest_c > 0:
        table_b[OTHER], table_c[OTHER] = max(rest_b, 0.0), max(rest_c, 0.0)
    return table_b, table_c


def _categorical(base: ColumnDrift, baseline: ColumnProfile, current: ColumnProfile) -> ColumnDrift:
    base = replace(base, measure="categories")
    table_b, table_c = _category_table(baseline, current)
    counts_b, counts_c = np.array(list(table_b.values())), np.array(list(table_c.values()))
    if not counts_b.sum() or not counts_c.sum():
        return _one_side_empty(base, not counts_b.sum(), not counts_c.sum())
    shares_b, shares_c = counts_b / counts_b.sum(), counts_c / counts_c.sum()
    statistic, p_value = st.chi_square(counts_b, counts_c)
    return replace(
        base,
        psi=st.psi(shares_b, shares_c),
        js=st.js_distance(shares_b, shares_c),
        linf=float(np.max(np.abs(shares_b - shares_c))),
        chi_square=statistic,
        test="chi2",
        p_value=p_value,
        shares=tuple(
            Share(key, float(x), float(y))
            for key, x, y in zip(table_b, shares_b, shares_c, strict=True)
        ),
    )
