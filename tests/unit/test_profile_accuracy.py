"""A profile's figures from a sample: what Arrow knows of every chunk stays exact, and every
estimate lies within the error its profile states (`profiles.accuracy`), on known
distributions."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from test_profile import profile_of

from thresher.errors import MonitorError
from thresher.profiles.profile import VERSION, ColumnProfile, Profile
from thresher.profiles.sampling import sample_rate_for

ROWS = 400_000


def data(seed: int = 21) -> tuple[pa.Table, pa.Table, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(5.0, 2.0, ROWS)
    x[::101] = np.nan
    x[::307] = np.inf
    nulls = rng.random(ROWS) < 0.05
    region = rng.choice(["north", "south", "east", "west"], ROWS, p=[0.5, 0.3, 0.15, 0.05])
    proba = rng.beta(2.0, 5.0, ROWS)
    label = (proba > 0.4).astype(np.int64)
    inputs = pa.table({"x": pa.array(x, mask=nulls), "region": region})
    outputs = pa.table({"proba": proba, "label": label})
    return inputs, outputs, {"x": x[~nulls], "region": region, "proba": proba, "label": label}


@pytest.fixture(scope="module")
def sampled() -> tuple[Profile, dict[str, np.ndarray]]:
    inputs, outputs, raw = data()
    rate = sample_rate_for(ROWS, 16_384)
    return profile_of(inputs, outputs, rate=rate, shards=4), raw


def errors(column: ColumnProfile) -> dict[str, Any]:
    found: dict[str, Any] = column.describe()["error"]
    return found


def test_arrow_counts_stay_exact_under_a_sample(
    sampled: tuple[Profile, dict[str, np.ndarray]],
) -> None:
    profile, raw = sampled
    x, values = profile.columns["x"], raw["x"]
    assert (x.rows, x.nulls) == (ROWS, ROWS - len(values))
    for figure in ("rows", "nulls"):
        assert errors(x)[figure] == "exact"
    label = profile.columns["label"]  # an output's class labels: every value counted
    assert dict(label.top()) == {str(v): int((raw["label"] == v).sum()) for v in (0, 1)}
    assert errors(label)["top"] == "exact"


def test_the_samples_figures_are_within_their_stated_error(
    sampled: tuple[Profile, dict[str, np.ndarray]],
) -> None:
    profile, raw = sampled
    x = profile.columns["x"]
    finite = np.sort(raw["x"][np.isfinite(raw["x"])])
    stated = errors(x)
    assert x.moments.count < len(finite) / 10  # a sample, not every row
    assert abs(x.moments.mean - finite.mean()) <= stated["mean"]["plus_minus"]
    assert abs(x.moments.std - finite.std()) <= stated["std"]["plus_minus"]
    for figure, value in (("min", x.moments.min), ("max", x.moments.max)):
        rank = np.searchsorted(finite, value) / len(finite)
        beyond = rank if figure == "min" else 1 - rank
        assert finite[0] <= value <= finite[-1] and beyond <= stated[figure]["rank_error"]
    assert x.quantiles is not None
    for q in np.linspace(0.01, 0.99, 25):
        rank = np.searchsorted(finite, x.quantiles.get_quantile(float(q)), side="right")
        assert abs(rank / len(finite) - q) <= stated["quantiles"]["rank_error"]


def test_shares_of_categories_and_histogram_bins_are_within_their_stated_error(
    sampled: tuple[Profile, dict[str, np.ndarray]],
) -> None:
    profile, raw = sampled
    region = profile.columns["region"]
    stated = errors(region)
    assert stated["top"] != "exact" and "lower bound" in stated["distinct"]["of"]
    for value, count in region.top():
        true = float((raw["region"] == value).mean())
        assert abs(count / ROWS - true) <= stated["top"]["share_error"], value
    proba = profile.columns["proba"]
    assert proba.probability is not None
    shares = np.array(proba.probability) / sum(proba.probability)
    true_shares = np.histogram(raw["proba"], bins=20, range=(0, 1))[0] / ROWS
    bound = errors(proba)["probability_histogram"]["share_error"]
    assert np.abs(shares - true_shares).max() <= bound


def test_nan_and_inf_of_floats_are_the_samples_within_their_stated_error(
    sampled: tuple[Profile, dict[str, np.ndarray]],
) -> None:
    """Nothing reads every value of an input: a float column's nan and inf are counted in
    the sample and scaled, within Hoeffding's bound of their share; the finite count
    within the same share of the non-null values."""
    profile, raw = sampled
    x, values = profile.columns["x"], raw["x"]
    assert 0 < x.scanned < len(values)
    stated = errors(x)
    for figure, truth in (("nan", np.isnan(values)), ("inf", np.isinf(values))):
        bound = stated[figure]["share_error"]
        assert bound == pytest.approx(math.sqrt(math.log(200) / (2 * x.scanned)))
        assert abs(getattr(x, figure) - int(truth.sum())) <= bound * len(values), figure
    count = x.describe()["count"]
    assert abs(count - int(np.isfinite(values).sum())) <= stated["count"]["plus_minus"]
    region = profile.columns["region"]  # text holds no nan: every value is known to be none
    assert region.nan_exact and errors(region)["nan"] == "exact"


def test_every_figure_is_exact_where_the_sample_is_every_row() -> None:
    inputs, outputs, _ = data()
    profile = profile_of(inputs.slice(0, 9_000), outputs.slice(0, 9_000), rate=1.0)
    for column in profile.columns.values():
        stated = errors(column)
        # the sketches' own errors stay: KLL's past a few hundred values, and HLL's
        assert {k for k, v in stated.items() if v != "exact"} <= {"quantiles", "distinct"}
        if column.quantiles is not None and "quantiles" in stated:
            kll = column.quantiles.normalized_rank_error(False)
            assert stated["quantiles"]["rank_error"] == kll, column.name


def test_a_profile_of_version_1_reads_with_its_moments_and_counts_exact() -> None:
    """Version 1 held moments and category counts of every row, and no `counted`."""
    inputs, _, _ = data()
    data_ = profile_of(inputs.slice(0, 2_000), rate=1.0, shards=1).to_json()
    data_["version"] = 1
    for column in data_["columns"].values():
        column.pop("counted")
        _as_version_2_counts(column)
        column["moments"]["count"] = column["rows"] - column["nulls"] - column["nan"]
        column["moments"]["count"] -= column["inf"]
    old = Profile.from_json(data_)
    region = old.columns["region"]
    assert region.counted == 2_000 and errors(region)["top"] == "exact"
    assert errors(old.columns["x"])["mean"] == "exact"


def _as_version_2_counts(column: dict[str, Any]) -> None:
    """Versions 1 and 2 held nan and inf of every value, and no `scanned`."""
    column["nan"], column["inf"] = column.pop("sampled_nan"), column.pop("sampled_inf")
    del column["scanned"]


def test_a_profile_of_version_2_reads_its_nan_and_inf_as_exact(
    sampled: tuple[Profile, dict[str, np.ndarray]],
) -> None:
    data_ = sampled[0].to_json()
    data_["version"] = 2
    for column in data_["columns"].values():
        _as_version_2_counts(column)
        column["nan"], column["inf"] = 7, 3
    x = Profile.from_json(data_).columns["x"]
    assert (x.nan, x.inf, x.nan_exact) == (7, 3, True)
    assert errors(x)["nan"] == errors(x)["inf"] == errors(x)["count"] == "exact"


def test_a_profile_of_a_later_version_is_refused_with_a_message() -> None:
    data_ = Profile(rows=1).to_json()
    data_["version"] = VERSION + 1
    with pytest.raises(MonitorError, match=rf"version {VERSION + 1}.*newer thresher.*upgrade"):
        Profile.from_json(data_)


def test_the_stated_quantile_error_adds_the_samples_dkw_bound() -> None:
    inputs, _, _ = data()
    column = profile_of(inputs, rate=0.01, shards=1).columns["x"]
    assert column.quantiles is not None
    n, kll = column.quantiles.n, column.quantiles.normalized_rank_error(False)
    want = kll + math.sqrt(math.log(200) / (2 * n))
    assert errors(column)["quantiles"]["rank_error"] == pytest.approx(want)


def test_thresher_profile_refuses_a_later_version_with_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store shared with a newer release: `thresher profile` says what to do, exit 1,
    no traceback."""
    from click.testing import CliRunner

    from thresher.cli import cli
    from thresher.profiles import profile as profile_module
    from thresher.store import open_store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with monkeypatch.context() as later:
        later.setattr(profile_module, "VERSION", VERSION + 1)
        open_store(url).profiles.save("j", Profile(rows=1))
    result = CliRunner().invoke(cli, ["--store", url, "profile", "j"])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert "newer thresher" in result.output and "upgrade" in result.output
