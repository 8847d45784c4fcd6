"""QuickScorer tables: the kernels score what the library predicts, to the bit for LightGBM,
on values right at the thresholds, missing values, infinities and partial row blocks; and
models the tables cannot hold are scored by tl2cgen's if/else code instead."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import lightgbm
import numpy as np
import pyarrow as pa
import pytest
import treelite
import xgboost

from thresher.native import which_compiler
from thresher.trees import quickscorer
from thresher.trees.library import TreeLibrary, build

pytestmark = pytest.mark.skipif(which_compiler() is None, reason="needs a C compiler")

WIDTH = 5


def _cpu_has(flag: str) -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in line.split() for line in text.splitlines() if line.startswith("flags"))


# The lanes the library should pick on this machine (x86-64 Linux; elsewhere 0 is right
# where it has no kernel, and the test says so): `NARROW_LANES` for trees of at most 32
# leaves with double leaves (LightGBM's), `LANES` for the others.
AVX512 = _cpu_has("avx512f") and _cpu_has("avx512dq")
LANES = 8 if AVX512 else 4 if _cpu_has("avx2") else 0
NARROW_LANES = 16 if AVX512 and _cpu_has("avx512cd") else LANES


def _training(seed: int = 1, rows: int = 3_000) -> tuple[np.ndarray, np.ndarray]:
    """Rows with 5% missing values, and a target that needs deep trees."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, WIDTH))
    x[rng.random(x.shape) < 0.05] = np.nan
    y = np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 1]) * np.nan_to_num(x[:, 2])
    return x, y


def _library(model: Path, frontend: str, folder: Path) -> TreeLibrary:
    library = folder / f"{model.stem}.so"
    build(model, frontend, library, which_compiler() or "gcc")  # type: ignore[arg-type]
    return TreeLibrary(library, threads=1)


def _if_else_library(
    model: Path, frontend: str, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> TreeLibrary:
    """The same model built without kernels: tl2cgen's if/else code scores every row."""
    with monkeypatch.context() as patch:
        patch.setattr(quickscorer, "source", lambda _: quickscorer.NONE)
        library = folder / f"{model.stem}-if-else.so"
        build(model, frontend, library, which_compiler() or "gcc")  # type: ignore[arg-type]
    return TreeLibrary(library, threads=1)


def _trees(model: Path, frontend: str) -> quickscorer.Ensemble:
    if frontend == "lightgbm":
        loaded = treelite.frontend.load_lightgbm_model(str(model))
    else:
        loaded = treelite.frontend.load_xgboost_model(str(model), allow_unknown_field=True)
    return quickscorer.from_treelite(loaded)


def _tiny(threshold: float) -> bool:
    """LightGBM's ±1e-35 thresholds, its "zero": LightGBM reads values that close to zero
    as zero, treelite's model does not, so compiled trees (if/else code or kernels alike)
    part from LightGBM on values in between."""
    return 0 < abs(threshold) < 1e-30


def _on_the_thresholds(
    trees: quickscorer.Ensemble, rows: int, seed: int = 7, tiny: bool = False
) -> np.ndarray:
    """Rows whose values sit on the model's thresholds, a step either side of them, or are
    missing or infinite: where `<` and `<=` part ways, and the default branches. The tiny
    thresholds (see `_tiny`) only if `tiny`, and then only those."""
    rng = np.random.default_rng(seed)
    by_feature: dict[int, list[float]] = {}
    for tree in trees.trees:
        for node in np.flatnonzero(tree.node_type == quickscorer.NUMERICAL):
            threshold = tree.threshold[node]
            if _tiny(threshold) == tiny:
                by_feature.setdefault(int(tree.feature[node]), []).append(threshold)
    x = rng.standard_normal((rows, WIDTH))
    for feature, thresholds in by_feature.items():
        picked = rng.choice(np.asarray(thresholds), size=rows)
        towards = rng.choice([-np.inf, np.inf, np.nan], size=rows)  # nan: stay on it
        towards = np.where(np.isnan(towards), picked, towards)
        if trees.float32:
            picked = np.nextafter(picked.astype(np.float32), towards.astype(np.float32))
        else:
            picked = np.nextafter(picked, towards)
        x[:, feature] = picked
    x[rng.random(x.shape) < 0.05] = np.nan
    x[rng.random(x.shape) < 0.01] = np.inf
    x[rng.random(x.shape) < 0.01] = -np.inf
    return x


def _table(x: np.ndarray) -> pa.Table:
    return pa.table({f"f{j}": np.ascontiguousarray(x[:, j]) for j in range(x.shape[1])})


@pytest.mark.parametrize(
    ("objective", "leaves", "lanes"),
    [
        ("binary", 31, NARROW_LANES),
        ("multiclass", 31, NARROW_LANES),
        ("regression", 31, NARROW_LANES),
        ("binary", 63, LANES),
        ("multiclass", 63, LANES),
    ],
)
def test_lightgbm_scores_are_lightgbm_s_to_the_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, objective: str, leaves: int, lanes: int
) -> None:
    x, y = _training(rows=6_000)
    params: dict[str, object] = {
        "objective": objective,
        "num_leaves": leaves,
        "min_data_in_leaf": 5,
        "verbose": -1,
    }
    if objective == "binary":
        y = (y > 0).astype(int)
    if objective == "multiclass":
        params["num_class"], y = 3, np.digitize(y, [-0.5, 0.5])
    booster = lightgbm.train(params, lightgbm.Dataset(x, y), num_boost_round=30)
    model = tmp_path / "model.txt"
    booster.save_model(str(model))
    library = _library(model, "lightgbm", tmp_path)
    assert library.lanes == lanes
    for rows in (1, 7, 9, 17, 4_003):  # blocks of lanes, whole and partial
        probe = _on_the_thresholds(_trees(model, "lightgbm"), rows)
        want = booster.predict(probe)
        np.testing.assert_array_equal(library.predict(_table(probe)), want)
    # Where LightGBM's "zero" makes tl2cgen's code part from it, the kernels part alike.
    if_else = _if_else_library(model, "lightgbm", tmp_path, monkeypatch)
    assert if_else.lanes == 0
    probe = _on_the_thresholds(_trees(model, "lightgbm"), 4_003, tiny=True)
    np.testing.assert_array_equal(library.predict(_table(probe)), if_else.predict(_table(probe)))


@pytest.mark.parametrize("objective", ["binary:logistic", "multi:softprob", "reg:squarederror"])
def test_xgboost_scores_are_xgboost_s(tmp_path: Path, objective: str) -> None:
    """XGBoost compares `value < threshold` in float32: the kernels compare
    `value > the float before threshold`, the same test."""
    x, y = _training(seed=2)
    params: dict[str, object] = {"objective": objective, "max_depth": 6, "nthread": 1}
    if objective == "binary:logistic":
        y = (y > 0).astype(int)
    if objective == "multi:softprob":
        params["num_class"], y = 3, np.digitize(y, [-0.5, 0.5])
    booster = xgboost.train(params, xgboost.DMatrix(x, label=y), num_boost_round=30)
    model = tmp_path / "model.json"
    booster.save_model(str(model))
    library = _library(model, "xgboost", tmp_path)
    assert library.lanes == LANES
    probe = _on_the_thresholds(_trees(model, "xgboost"), 4_003)
    want = booster.inplace_predict(probe)
    np.testing.assert_allclose(library.predict(_table(probe)), want, rtol=1e-5, atol=1e-6)


def test_rows_in_a_matrix_score_as_columns_do(tmp_path: Path) -> None:
    """Integer columns make the driver read one row-major matrix (stride = width)."""
    x, y = _training(seed=3)
    booster = lightgbm.train(
        {"objective": "regression", "verbose": -1}, lightgbm.Dataset(x, y), num_boost_round=20
    )
    model = tmp_path / "model.txt"
    booster.save_model(str(model))
    library = _library(model, "lightgbm", tmp_path)
    whole = np.round(np.nan_to_num(_training(seed=4, rows=1_001)[0]) * 4)
    table = _table(whole).set_column(0, "f0", pa.array(whole[:, 0].astype(np.int64)))
    np.testing.assert_array_equal(library.predict(table), booster.predict(whole))
    want = booster.predict(whole)
    np.testing.assert_array_equal(library.predict_matrix(whole), want)
    np.testing.assert_array_equal(library.predict_matrix(np.asfortranarray(whole)), want)
    np.testing.assert_array_equal(library.predict_matrix(np.asfortranarray(whole)[5:]), want[5:])
    np.testing.assert_array_equal(library.predict_matrix(whole[::2]), want[::2])
    np.testing.assert_array_equal(library.predict_matrix(whole.astype(np.float32)), want)


def test_models_the_tables_cannot_hold_run_the_if_else_code(tmp_path: Path) -> None:
    """Categorical splits, and trees of more than 64 leaves: no kernel, same scores."""
    x, y = _training(seed=5, rows=6_000)
    x[:, 3] = np.abs(np.round(np.nan_to_num(x[:, 3]) * 3))  # a categorical feature
    y = y + (x[:, 3] == 2)
    for name, params, categorical in [
        ("categorical", {"num_leaves": 15}, [3]),
        ("leafy", {"num_leaves": 100, "min_data_in_leaf": 5}, "auto"),
    ]:
        data = lightgbm.Dataset(x, y, categorical_feature=categorical)
        booster = lightgbm.train(
            {"objective": "regression", "verbose": -1, **params}, data, num_boost_round=10
        )
        model = tmp_path / f"{name}.txt"
        booster.save_model(str(model))
        assert quickscorer.unfit(_trees(model, "lightgbm")) is not None
        library = _library(model, "lightgbm", tmp_path)
        assert library.lanes == 0
        probe = x[:500]
        np.testing.assert_allclose(
            library.predict(_table(probe)), booster.predict(probe), rtol=1e-12, atol=1e-12
        )


def _tree(*nodes: tuple[int, int, float]) -> quickscorer.Tree:
    """A tree from (left, right, value) per node: left -1 makes a leaf of that value, else a
    test `f0 <= value` whose missing values go left."""
    left, right, value = (np.array(column) for column in zip(*nodes, strict=True))
    tests = left >= 0
    return quickscorer.Tree(
        node_type=np.where(tests, quickscorer.NUMERICAL, quickscorer.LEAF),
        left=left,
        right=right,
        feature=np.where(tests, 0, -1),
        threshold=np.where(tests, value, 0.0),
        operator=np.where(tests, quickscorer.LESS_OR_EQUAL, 0),
        default_left=np.ones(len(nodes), dtype=bool),
        leaf_value=np.where(tests, 0.0, value),
    )


LEAF = (-1, -1, 1.0)
STUMP = _tree((1, 2, 0.5), LEAF, LEAF)


def _model(trees: list[quickscorer.Tree], **fields: object) -> quickscorer.Ensemble:
    model = quickscorer.Ensemble(
        trees=trees,
        features=1,
        float32=False,
        outputs=[0] * len(trees),
        base_scores=[0.0],
        averaged=False,
        vector_leaves=False,
        double_leaves=True,
    )
    return dataclasses.replace(model, **fields)  # type: ignore[arg-type]


def test_leaves_are_numbered_left_to_right_and_tests_know_their_left_leaves() -> None:
    # node 0 tests: left is leaf 2 (value 1), right is node 1, which tests: left leaf 4
    # (value 2), right leaf 3 (value 3). Node ids in no particular order, as in files.
    tree = _tree((2, 1, 0.0), (4, 3, 0.5), (-1, -1, 1.0), (-1, -1, 3.0), (-1, -1, 2.0))
    leaves: list[float] = []
    spans = {
        node: (first, last)
        for node, first, last in quickscorer._tests_with_left_leaves(tree, leaves)
    }
    assert leaves == [1.0, 2.0, 3.0]
    assert spans == {0: (0, 0), 1: (1, 1)}


def test_a_test_whose_left_is_a_subtree_rules_out_all_its_leaves() -> None:
    tree = _tree((1, 4, 0.0), (2, 3, -1.0), LEAF, LEAF, LEAF)
    tests = quickscorer._tests_with_left_leaves(tree, [])
    assert sorted(tests) == [(0, 0, 1), (1, 0, 0)]


def test_a_model_that_fits_is_written_as_tables_and_kernels() -> None:
    code = quickscorer.source(_model([STUMP, STUMP], outputs=[0, 0]))
    assert quickscorer.unfit(_model([STUMP])) is None
    assert "qs_threshold[] = {0x1.0000000000000p-1,0x1.0000000000000p-1}" in code
    assert "score_avx512" in code and "score_avx2" in code
    assert "#define QS_NARROW 1" in code  # 2 leaves a tree, double leaves: 16 rows at a time
    floats = quickscorer.source(_model([STUMP], double_leaves=False))
    assert "#define QS_NARROW 0" in floats


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (_model([STUMP], averaged=True), "averaged"),
        (_model([STUMP], vector_leaves=True), "vectors"),
        (_model([]), "no trees"),
        (_model([STUMP], outputs=[-1]), "every output"),
        (_model([dataclasses.replace(STUMP, operator=np.array([4, 0, 0]))]), "'>'"),
        (_model([dataclasses.replace(STUMP, node_type=np.array([2, 0, 0]))]), "categorical"),
        (
            _model([_tree(*[(2 * i + 1, 2 * i + 2, 0.0) for i in range(64)], *[LEAF] * 65)]),
            "65 leaves",
        ),
    ],
)
def test_unfit_says_why(model: quickscorer.Ensemble, reason: str) -> None:
    assert reason in (quickscorer.unfit(model) or "")
    assert "score_avx" not in quickscorer.source(model)  # no kernel: the if/else code scores


def test_a_strict_split_goes_right_from_the_threshold_itself() -> None:
    less, less_or_equal = quickscorer.LESS, quickscorer.LESS_OR_EQUAL
    assert quickscorer._right_above(0.5, less_or_equal, float32=False) == 0.5
    below = quickscorer._right_above(0.5, less, float32=False)
    assert below < 0.5 and np.nextafter(below, 1.0) == 0.5
    below32 = np.float32(quickscorer._right_above(0.5, less, float32=True))
    assert below32 < np.float32(0.5) and np.nextafter(below32, np.float32(1)) == np.float32(0.5)
