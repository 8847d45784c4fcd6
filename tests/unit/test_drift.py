"""Drift from two profiles: known shifts on generated data give the expected verdicts, and
every figure matches its definition on the raw data (scipy and numpy as the oracles)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import scipy.spatial.distance
import scipy.stats

from thresher.monitor import MonitorSection, Profile, compare_profiles
from thresher.monitor.drift_stats import EPSILON, benjamini_hochberg
from thresher.profiles.profiler import ShardProfiler
from thresher.profiles.sampling import sample_rate_for

CATEGORIES = np.array(["red", "green", "blue"])


def profile_of(
    inputs: dict[str, Any],
    outputs: dict[str, Any] | None = None,
    rate: float = 1.0,
    segment_by: str | None = None,
    seed: int = 0,
) -> Profile:
    table = pa.table(inputs)
    profiler = ShardProfiler(rate, seed, segment_by)
    out = pa.table(outputs) if outputs else pa.table({})
    segments = None
    if segment_by:
        column = table.column(segment_by)
        segments = (column, column if outputs else pa.chunked_array([], column.type))
    profiler.update(table, out, segments)
    return profiler.profile()


def customers(rows: int, seed: int, shift: float = 0.0, blue: float = 1 / 3) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    other = (1 - blue) / 2
    return {
        "age": rng.normal(40, 10, rows),
        "income": rng.lognormal(10, 0.5, rows) * np.exp(shift),
        "tenure": rng.exponential(3, rows) + shift * 3,
        "colour": rng.choice(CATEGORIES, rows, p=[other, other, blue]),
    }


def scores(rows: int, seed: int, positive: float = 0.5) -> dict[str, Any]:
    rng = np.random.default_rng(seed + 100)
    return {"label": (rng.uniform(size=rows) < positive).astype(np.int64)}


# Known shifts.


def test_a_mean_shift_in_one_feature_drifts_that_column_alone() -> None:
    rows = 50_000
    baseline = customers(rows, seed=0)
    current = customers(rows, seed=1)
    current["age"] = current["age"] + 10.0  # one standard deviation
    report = compare_profiles(
        profile_of(baseline, scores(rows, 0)), profile_of(current, scores(rows, 1))
    )
    verdicts = {c.name: c.verdict for c in report.columns}
    assert verdicts == {
        "age": "drift",
        "income": "ok",
        "tenure": "ok",
        "colour": "ok",
        "label": "ok",
    }
    assert report.verdict == "drift" and report.drifted == ["age"]
    age = report.column("age")
    assert age.psi is not None and age.psi > 0.5
    assert age.ks is not None and age.ks > 0.3 and age.significant
    assert age.wasserstein == pytest.approx(1.0, abs=0.1)  # one baseline std, less the sketch error
    assert age.measure == "values" and age.test == "ks" and len(age.edges) == 9


def test_no_shift_gives_all_ok_and_nothing_significant() -> None:
    rows = 50_000
    report = compare_profiles(
        profile_of(customers(rows, seed=0), scores(rows, 0)),
        profile_of(customers(rows, seed=1), scores(rows, 1)),
    )
    assert report.verdict == "ok"
    for column in report.columns:
        assert column.verdict == "ok", column
        assert column.psi is not None and column.psi < 0.01, column
        assert column.significant is False, column
    json.dumps(report.to_json(), allow_nan=False)


def test_a_new_category_is_counted_with_a_finite_chi_square() -> None:
    rows = 20_000
    baseline = customers(rows, seed=0)
    current = customers(rows, seed=1)
    current["colour"][: rows // 10] = "cyan"  # new: 10% of the rows
    report = compare_profiles(profile_of(baseline), profile_of(current))
    colour = report.column("colour")
    assert colour.measure == "categories" and colour.test == "chi2"
    assert colour.chi_square is not None and np.isfinite(colour.chi_square)
    assert colour.psi is not None and np.isfinite(colour.psi) and colour.verdict == "drift"
    shares = {s.label: s for s in colour.shares}
    assert shares["cyan"].baseline == 0.0
    assert shares["cyan"].current == pytest.approx(0.1)
    assert colour.linf == pytest.approx(max(abs(s.current - s.baseline) for s in colour.shares))
    expected = (0.1 - EPSILON) * np.log(0.1 / EPSILON)  # the new category's term alone
    assert colour.psi > expected
    # The statistic is the test of homogeneity on the 2 x K table of counts.
    table = np.array(
        [[s.baseline * rows for s in colour.shares], [s.current * rows for s in colour.shares]]
    )
    chi2, p, *_ = scipy.stats.chi2_contingency(table, correction=False)
    assert colour.chi_square == pytest.approx(chi2, rel=1e-9)
    assert colour.p_value == pytest.approx(p, abs=1e-12)


def test_a_class_share_change_in_the_outputs_is_reported_and_drifts() -> None:
    rows = 20_000
    report = compare_profiles(
        profile_of(customers(rows, 0), scores(rows, 0, positive=0.5)),
        profile_of(customers(rows, 1), scores(rows, 1, positive=0.8)),
    )
    shares = {s.label: (s.baseline, s.current) for s in report.class_shares["label"]}
    assert shares["1"][0] == pytest.approx(0.5, abs=0.02)
    assert shares["1"][1] == pytest.approx(0.8, abs=0.02)
    assert report.column("label").verdict == "drift" and report.column("label").role == "output"
    # Class shares are reported whatever columns are asked for.
    only_age = compare_profiles(
        profile_of(customers(rows, 0), scores(rows, 0, positive=0.5)),
        profile_of(customers(rows, 1), scores(rows, 1, positive=0.8)),
        columns=["age"],
    )
    assert [c.name for c in only_age.columns] == ["age"] and "label" in only_age.class_shares


def test_thresholds_come_from_the_monitor_section() -> None:
    rows = 20_000
    baseline, current = customers(rows, 0), customers(rows, 1)
    current["age"] = current["age"] + 3.0  # PSI about 0.09: below the default warn
    monitor = MonitorSection(psi_warn=0.02, psi_drift=0.05)
    default = compare_profiles(profile_of(baseline), profile_of(current))
    strict = compare_profiles(profile_of(baseline), profile_of(current), monitor)
    assert default.column("age").verdict in ("ok", "warn")
    assert strict.column("age").verdict == "drift"
    assert strict.thresholds.psi_drift == 0.05


# Figures against their definitions on the raw data.


def test_psi_and_js_equal_a_hand_computation_on_the_frozen_deciles() -> None:
    rows = 180  # under the KLL's k = 200, sample rate 1: the sketch holds every value
    rng = np.random.default_rng(7)
    a, b = rng.normal(0, 1, rows), rng.normal(0.4, 1.2, rows)
    report = compare_profiles(profile_of({"x": a}), profile_of({"x": b}))
    column = report.column("x")
    edges = np.asarray(column.edges)
    assert np.array_equal(edges, np.unique(edges)) and len(edges) == 9
    # Each edge is a value of the baseline at its decile.
    for i, edge in enumerate(edges, start=1):
        assert edge in a and np.mean(a < edge) <= i / 10 <= np.mean(a <= edge)
    bins_a = np.bincount(np.searchsorted(edges, a, side="right"), minlength=10) / rows
    bins_b = np.bincount(np.searchsorted(edges, b, side="right"), minlength=10) / rows
    hand_b, hand_c = np.maximum(bins_a, EPSILON), np.maximum(bins_b, EPSILON)
    hand_psi = float(np.sum((hand_c - hand_b) * np.log(hand_c / hand_b)))
    assert column.psi == pytest.approx(hand_psi, abs=1e-9)
    assert [s.baseline for s in column.shares] == pytest.approx(list(bins_a), abs=1e-12)
    hand_js = scipy.spatial.distance.jensenshannon(bins_a, bins_b, base=2)
    assert column.js == pytest.approx(hand_js, abs=1e-9)
    hand_w = scipy.stats.wasserstein_distance(a, b) / np.std(a)
    assert column.wasserstein == pytest.approx(hand_w, abs=1e-9)
    assert column.ks == pytest.approx(scipy.stats.ks_2samp(a, b).statistic, abs=1e-12)
    assert column.ks_bound == 0.0


def test_psi_at_realistic_sizes_is_close_to_the_exact_one() -> None:
    rows = 400_000
    rate = sample_rate_for(rows, 131_072)  # the sample size these bounds were measured at
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, rows), rng.normal(0.3, 1, rows)
    report = compare_profiles(
        profile_of({"x": a}, rate=rate), profile_of({"x": b}, rate=rate, seed=1)
    )
    column = report.column("x")
    edges = np.asarray(column.edges)
    exact_a = np.bincount(np.searchsorted(edges, a, side="right"), minlength=10) / rows
    exact_b = np.bincount(np.searchsorted(edges, b, side="right"), minlength=10) / rows
    hand = float(np.sum((exact_b - exact_a) * np.log(exact_b / exact_a)))
    # Sampled sketches: each share is off by up to the rank errors of two edges (about
    # 0.01 here); over 15 seeds PSI was within 0.011 of the exact 0.085, W1 within 0.035.
    assert column.psi == pytest.approx(hand, abs=0.02)
    w = scipy.stats.wasserstein_distance(a, b) / np.std(a)
    assert column.wasserstein == pytest.approx(w, abs=0.06)


@pytest.mark.parametrize(
    ("rows", "rate", "scale", "shift"),
    [
        (150, 1.0, 1.0, 0.3),  # exact: the sketch holds every value
        (30_000, 1.0, 1.0, 0.05),  # estimation mode
        (30_000, 1.0, 1.5, 0.0),  # another spread, same centre
        (300_000, 0.2, 1.0, 0.02),  # a Bernoulli sample into the sketch
    ],
)
def test_sketch_ks_is_within_its_stated_bound_of_scipy(
    rows: int, rate: float, scale: float, shift: float
) -> None:
    rng = np.random.default_rng(rows)
    a, b = rng.normal(0, 1, rows), rng.normal(shift, scale, rows)
    column = compare_profiles(
        profile_of({"x": a}, rate=rate), profile_of({"x": b}, rate=rate, seed=1)
    ).column("x")
    raw = scipy.stats.ks_2samp(a, b).statistic
    assert column.ks is not None and column.ks_bound is not None
    assert abs(column.ks - raw) <= column.ks_bound + 1e-12, (column.ks, raw, column.ks_bound)
    if rate < 1.0:
        assert column.ks_bound > 2 * 0.0165  # the DKW terms are in


def test_sketch_quantiles_are_within_their_rank_error_of_numpy() -> None:
    rows = 100_000
    values = np.random.default_rng(11).lognormal(0, 1, rows)
    sketch = profile_of({"x": values}).columns["x"].quantiles
    assert sketch is not None and sketch.is_estimation_mode()
    error = sketch.normalized_rank_error(False)
    ordered = np.sort(values)
    for q in np.linspace(0.01, 0.99, 99):
        estimate = sketch.get_quantile(q)
        rank = np.searchsorted(ordered, estimate, side="right") / rows
        assert abs(rank - q) <= error, (q, rank, error)
        truth = np.quantile(values, q)
        low, high = np.quantile(values, [max(q - error, 0), min(q + error, 1)])
        assert low <= estimate <= high, (q, estimate, truth)


def test_benjamini_hochberg_equals_scipy() -> None:
    p = list(np.random.default_rng(0).uniform(size=40) ** 3)
    assert benjamini_hochberg(p) == pytest.approx(list(scipy.stats.false_discovery_control(p)))
    assert benjamini_hochberg([]) == []


# Columns, segments, text, nulls.


def test_columns_on_one_side_only_are_listed_not_compared() -> None:
    rows = 2_000
    baseline, current = customers(rows, 0), customers(rows, 1)
    baseline["legacy"] = np.zeros(rows)
    current["fresh"] = np.ones(rows)
    report = compare_profiles(profile_of(baseline), profile_of(current))
    assert report.added == ("fresh",) and report.removed == ("legacy",)
    assert {c.name for c in report.columns} == {"age", "income", "tenure", "colour"}


def test_each_segment_is_compared_and_its_share_of_rows_reported() -> None:
    rows = 60_000
    baseline, current = customers(rows, 0), customers(rows, 1)
    region = np.array(["north", "south"])
    baseline["region"] = region[np.random.default_rng(0).integers(0, 2, rows)]
    current["region"] = region[(np.random.default_rng(1).uniform(size=rows) < 0.3).astype(int)]
    north = current["region"] == "north"
    current["income"] = np.where(north, current["income"] * 3.0, current["income"])
    report = compare_profiles(
        profile_of(baseline, segment_by="region"), profile_of(current, segment_by="region")
    )
    assert report.segment_by == "region"
    segments = {s.key: s for s in report.segments}
    assert set(segments) == {"north", "south"}
    assert segments["north"].row_share.baseline == pytest.approx(0.5, abs=0.01)
    assert segments["north"].row_share.current == pytest.approx(0.7, abs=0.01)
    by_column = {c.name: c.verdict for c in segments["north"].columns}
    assert by_column["income"] == "drift" and segments["north"].verdict == "drift"
    assert {c.name: c.verdict for c in segments["south"].columns}["income"] == "ok"


def test_text_columns_drift_by_their_lengths() -> None:
    rows = 5_000
    rng = np.random.default_rng(0)

    def notes(low: int, high: int) -> np.ndarray:
        return np.array(
            [f"note {i} " + "x" * int(n) for i, n in enumerate(rng.integers(low, high, rows))]
        )

    report = compare_profiles(
        profile_of({"note": notes(0, 20)}), profile_of({"note": notes(15, 60)})
    )
    column = report.column("note")
    assert column.kind == "text" and column.measure == "lengths" and column.verdict == "drift"


def test_null_and_nan_shares_are_reported() -> None:
    rows = 10_000
    a = np.random.default_rng(0).normal(size=rows)
    b = np.random.default_rng(1).normal(size=rows)
    b[:1000] = np.nan
    mask = np.zeros(rows, dtype=bool)
    mask[-500:] = True
    report = compare_profiles(profile_of({"x": a}), profile_of({"x": pa.array(b, mask=mask)}))
    column = report.column("x")
    assert column.null_share.baseline == 0.0 and column.null_share.current == pytest.approx(0.05)
    assert column.nan_share.current == pytest.approx(0.1)


def test_a_column_whose_kind_changed_drifts_with_a_note() -> None:
    rows = 1_000
    report = compare_profiles(
        profile_of({"code": np.arange(rows, dtype=np.float64)}),
        profile_of({"code": np.array(["a", "b"])[np.arange(rows) % 2]}),
    )
    column = report.column("code")
    assert column.verdict == "drift" and column.note == "kind changed: numeric → categorical"


def test_an_all_null_current_column_drifts() -> None:
    rows = 1_000
    report = compare_profiles(
        profile_of({"x": np.ones(rows) + np.arange(rows)}),
        profile_of({"x": pa.array([None] * rows, pa.float64())}),
    )
    column = report.column("x")
    assert column.verdict == "drift" and column.note == "no values in the current"
    assert column.null_share.current == 1.0
