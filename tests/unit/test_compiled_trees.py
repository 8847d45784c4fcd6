"""Tree ensembles compiled in process by LLVM (llvmlite): the same outputs as the library,
no C compiler run, a private cache that a pool of workers shares, and a clear fallback
(or error) when compiling is not possible."""

from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import lightgbm
import numpy as np
import pyarrow as pa
import pytest
import xgboost

from thresher import loops
from thresher.arrays import to_matrix
from thresher.errors import ModelLoadError
from thresher.trees import compiled as compiled_trees
from thresher.trees.compiled import Predict, Trees, cache_dir, compile_option, fastest

WIDTH = 6


def _rows(count: int = 2_000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((count, WIDTH))
    x[rng.random(x.shape) < 0.05] = np.nan  # missing values take the trees' default branch
    return x


def _lightgbm(folder: Path, objective: str = "binary") -> tuple[Path, lightgbm.Booster]:
    x = _rows(seed=1)
    y = (np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 1]) > 0).astype(int)
    params = {"objective": objective, "num_leaves": 15, "verbose": -1}
    if objective == "multiclass":
        params["num_class"], y = 3, np.digitize(np.nan_to_num(x[:, 0]), [-0.5, 0.5])
    booster = lightgbm.train(params, lightgbm.Dataset(x, y), num_boost_round=20)
    path = folder / f"lightgbm-{objective}.txt"
    booster.save_model(str(path))
    return path, booster


def _xgboost(folder: Path) -> tuple[Path, xgboost.Booster]:
    x = _rows(seed=2)
    y = (np.nan_to_num(x[:, 2]) > 0).astype(int)
    params = {"objective": "binary:logistic", "max_depth": 4, "nthread": 1}
    booster = xgboost.train(params, xgboost.DMatrix(x, label=y), num_boost_round=20)
    path = folder / "xgboost.json"
    booster.save_model(str(path))
    return path, booster


def _table(x: np.ndarray) -> pa.Table:
    return pa.table({f"f{j}": x[:, j] for j in range(x.shape[1])})


def _native(booster: lightgbm.Booster | xgboost.Booster) -> Predict:
    """The library's own predict, on a batch's feature table, as the adapters call it."""
    if isinstance(booster, xgboost.Booster):
        return lambda table: booster.inplace_predict(to_matrix(table))
    return lambda table: booster.predict(to_matrix(table))


def _loader(predict: Predict, facts: dict[str, object] | None = None) -> Callable[[], Trees]:
    """What an adapter passes: loads the model through its library, here already loaded."""
    return lambda: Trees(predict, WIDTH, facts or {})


def _never() -> Trees:
    raise AssertionError("loaded the model through its library")


def _fastest(
    path: Path, predict: Predict, *, threads: int = 1, mode: bool | Literal["auto"] = True
) -> Predict:
    return fastest(path, "lightgbm", _loader(predict), threads=threads, mode=mode).predict


def _libraries() -> list[Path]:
    """The compiled models (object code) in the cache."""
    return sorted(cache_dir().glob("*.o")) if cache_dir().exists() else []


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("THRESHER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("objective", ["binary", "multiclass", "regression"])
def test_compiled_lightgbm_predicts_what_lightgbm_predicts(
    tmp_path: Path, cache: Path, objective: str
) -> None:
    path, booster = _lightgbm(tmp_path, objective)
    native = _native(booster)
    predict = _fastest(path, native, threads=1, mode="auto")
    assert predict is not native
    assert len(_libraries()) == 1
    x = _rows(5_000, seed=3)
    np.testing.assert_allclose(predict(_table(x)), native(_table(x)), rtol=1e-12, atol=1e-12)


def test_compiled_xgboost_predicts_what_xgboost_predicts(tmp_path: Path, cache: Path) -> None:
    path, booster = _xgboost(tmp_path)
    native = _native(booster)
    predict = fastest(path, "xgboost", _loader(native), threads=2, mode=True).predict
    assert predict is not native
    x = _rows(5_000, seed=3)
    np.testing.assert_allclose(predict(_table(x)), native(_table(x)), rtol=1e-5, atol=1e-6)


def test_zero_read_as_missing_predicts_what_lightgbm_predicts(
    tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """LightGBM's `zero_as_missing` reads zeros and NaN as missing; treelite's model of it
    does not. The load-time probe (missing values and zeros) sees the outputs differ, and
    the job runs LightGBM's own predict: its predictions are LightGBM's."""
    x = _rows(seed=7)
    x[np.random.default_rng(8).random(x.shape) < 0.2] = 0.0
    y = (np.nan_to_num(x[:, 0]) - np.nan_to_num(x[:, 1]) > 0).astype(int)
    params = {"objective": "binary", "zero_as_missing": True, "verbose": -1}
    booster = lightgbm.train(params, lightgbm.Dataset(x, y), num_boost_round=20)
    path = tmp_path / "zeros.txt"
    booster.save_model(str(path))
    with caplog.at_level(logging.WARNING, logger="thresher.models"):
        predict = _fastest(path, _native(booster), threads=1, mode="auto")
    assert "differ" in caplog.text
    probe = _rows(3_000, seed=9)
    probe[np.random.default_rng(10).random(probe.shape) < 0.2] = 0.0
    np.testing.assert_allclose(predict(_table(probe)), booster.predict(probe), rtol=1e-12)


def test_a_second_load_reuses_the_compiled_library(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, booster = _lightgbm(tmp_path)
    _fastest(path, _native(booster), threads=1, mode=True)
    (library,) = _libraries()
    built = library.stat().st_mtime_ns

    def no_compiling(*_: object, **__: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(compiled_trees, "_object_code", no_compiling)
    _fastest(path, _native(booster), threads=1, mode=True)
    assert _libraries() == [library]
    assert library.stat().st_mtime_ns == built


def test_a_checked_library_loads_without_its_frontend(tmp_path: Path, cache: Path) -> None:
    path, booster = _lightgbm(tmp_path)
    facts = {"objective": "binary", "classes": 2}
    fastest(path, "lightgbm", _loader(_native(booster), facts), threads=1, mode="auto")
    again = fastest(path, "lightgbm", _never, threads=1, mode="auto")
    assert (again.width, again.facts) == (WIDTH, facts)
    x = _rows(500, seed=4)
    np.testing.assert_allclose(again.predict(_table(x)), booster.predict(x), rtol=1e-12, atol=1e-12)


def test_kept_facts_that_cannot_be_read_are_checked_again(tmp_path: Path, cache: Path) -> None:
    path, booster = _lightgbm(tmp_path)
    _fastest(path, _native(booster))
    (kept,) = cache_dir().glob("*.json")
    kept.write_text('{"width": ')  # cut short
    loads = []

    def load() -> Trees:
        loads.append(1)
        return Trees(_native(booster), WIDTH, {"objective": "binary"})

    fastest(path, "lightgbm", load, threads=1, mode=True)
    assert loads == [1]
    assert fastest(path, "lightgbm", _never, threads=1, mode=True).facts == {"objective": "binary"}


def test_a_job_model_loaded_from_the_cache_never_imports_lightgbm(
    tmp_path: Path, cache: Path
) -> None:
    """The point of keeping the facts: a worker skips LightGBM's import (and scikit-learn's
    and pandas', which it pulls in)."""
    path, _ = _lightgbm(tmp_path)
    load = (
        "import sys\n"
        "from thresher.models import LoadContext, load_model\n"
        "from thresher.spec import ModelSection\n"
        f"spec = ModelSection(kind='lightgbm', uri={str(path)!r})\n"
        "load_model(spec, LoadContext(features=(), threads=1))\n"
        "print(sorted({'lightgbm', 'sklearn', 'pandas'} & set(sys.modules)))\n"
    )
    env = os.environ | {"THRESHER_CACHE": str(cache)}

    def imported() -> str:
        done = subprocess.run(
            [sys.executable, "-c", load], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    assert "lightgbm" in imported()  # compiles, checks against LightGBM, keeps the facts
    assert imported() == "[]"


def _load_in_process(path: str, cache: str) -> None:
    import os

    os.environ["THRESHER_CACHE"] = cache
    booster = lightgbm.Booster(model_file=path)
    _fastest(Path(path), _native(booster))


def test_workers_that_load_at_once_compile_once(tmp_path: Path, cache: Path) -> None:
    path, _ = _lightgbm(tmp_path)
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_load_in_process, args=(str(path), str(cache))) for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert len(_libraries()) == 1
    assert not list(cache_dir().glob("*.partial"))


def test_compile_false_keeps_the_library_predict(tmp_path: Path, cache: Path) -> None:
    path, booster = _lightgbm(tmp_path)
    native = _native(booster)
    assert _fastest(path, native, threads=1, mode=False) is native
    assert _libraries() == []


def test_no_c_compiler_is_run_and_the_trees_still_compile(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLVM comes in llvmlite's wheel: with no compiler on PATH, and no process started
    at all, the model still runs compiled (and the manifest will say `native`)."""
    path, booster = _lightgbm(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    started: list[object] = []

    def no_processes(*args: object, **_: object) -> None:
        started.append(args)
        raise AssertionError(f"started a process: {args}")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_processes)
    monkeypatch.setattr(os, "posix_spawn", no_processes)
    trees = fastest(path, "lightgbm", _loader(native := _native(booster)), threads=1, mode=True)
    assert trees.native
    assert started == []
    x = _rows(2_000, seed=11)
    np.testing.assert_allclose(trees.predict(_table(x)), native(_table(x)), rtol=1e-12)


def test_without_llvmlite_auto_falls_back_and_true_fails(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, booster = _lightgbm(tmp_path)
    monkeypatch.setitem(sys.modules, "llvmlite", None)  # import llvmlite raises ImportError
    with caplog.at_level(logging.WARNING, logger="thresher.models"):
        trees = fastest(
            path, "lightgbm", _loader(native := _native(booster)), threads=1, mode="auto"
        )
    assert trees.predict is native
    assert not trees.native
    assert "llvmlite is not installed" in caplog.text
    assert "WARNING" in caplog.text
    with pytest.raises(ModelLoadError, match=r"compile = true.*llvmlite is not installed"):
        _fastest(path, _native(booster), threads=1, mode=True)


def test_a_compiled_model_that_disagrees_is_not_used(
    tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, booster = _lightgbm(tmp_path)

    def shifted(table: pa.Table) -> np.ndarray:  # stands in for a transform read wrongly
        return np.asarray(booster.predict(to_matrix(table))) * 0.5

    with caplog.at_level(logging.WARNING, logger="thresher.models"):
        predict = _fastest(path, shifted, threads=1, mode="auto")
    assert predict is shifted
    assert "differ" in caplog.text
    assert not list(cache_dir().glob("*.json"))  # so the next load checks it again
    with pytest.raises(ModelLoadError, match="differ"):
        _fastest(path, shifted, threads=1, mode=True)


def test_a_file_treelite_cannot_read_falls_back_with_the_reason(
    tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, booster = _lightgbm(tmp_path)
    broken = tmp_path / "broken.txt"
    broken.write_text("tree\nversion=v4\nthis is not a LightGBM model\n")
    with caplog.at_level(logging.WARNING, logger="thresher.models"):
        predict = _fastest(broken, native := _native(booster), threads=1, mode="auto")
    assert predict is native
    assert "broken.txt" in caplog.text
    assert not list(cache_dir().glob("*.partial"))


@pytest.mark.parametrize("value", [True, False, "auto"])
def test_compile_option_accepts_true_false_auto(value: object) -> None:
    assert compile_option({"compile": value}) == value
    assert compile_option({}) == "auto"


def test_compile_option_refuses_anything_else() -> None:
    with pytest.raises(ModelLoadError, match=r"model\.options\.compile: 'yes'"):
        compile_option({"compile": "yes"})


def test_several_threads_share_a_batch_and_agree(tmp_path: Path, cache: Path) -> None:
    path, booster = _lightgbm(tmp_path, "multiclass")
    predict = _fastest(path, _native(booster), threads=3)
    x = _rows(10_000, seed=5)
    np.testing.assert_allclose(predict(_table(x)), booster.predict(x), rtol=1e-12, atol=1e-12)


def test_columns_arrow_cannot_lend_are_converted_first(tmp_path: Path, cache: Path) -> None:
    """Integers, nulls and columns in several chunks go through one float64 matrix; text
    fails the batch with ValueError, which the engine reports row by row."""
    path, booster = _lightgbm(tmp_path)
    predict = _fastest(path, _native(booster))
    x = np.round(_rows(300, seed=6) * 10)
    table = _table(x)
    whole = np.nan_to_num(x[:, 0]).astype(np.int64)
    table = table.set_column(0, "f0", pa.array(whole))  # an integer column
    table = table.set_column(1, "f1", pa.chunked_array([x[:100, 1], x[100:, 1]]))
    table = table.set_column(2, "f2", pa.array(x[:, 2], from_pandas=True))  # NaN -> null
    x[:, 0] = whole
    assert table.column(2).null_count > 0
    np.testing.assert_allclose(predict(table), booster.predict(x), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        predict(table.set_column(3, "f3", pa.array(["x"] * 300)))


def test_a_cache_folder_others_can_write_is_neither_read_nor_written(
    tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Running kept object code is running its code: from a folder another user could
    have written into, nothing is loaded; the trees are compiled in memory instead, and
    a warning says each load compiles again."""
    path, booster = _lightgbm(tmp_path)
    _fastest(path, _native(booster))
    (kept,) = _libraries()
    cache_dir().chmod(0o777)
    loads: list[int] = []

    def load() -> Trees:
        loads.append(1)
        return Trees(_native(booster), WIDTH, {})

    with caplog.at_level(logging.WARNING, logger="thresher.models"):
        trees = fastest(path, "lightgbm", load, threads=1, mode="auto")
    assert loads == [1]  # the kept forest was not run: compiled again, checked again
    assert trees.native
    assert "not private" in caplog.text
    assert _libraries() == [kept]


def test_a_kept_file_others_can_write_is_not_run(tmp_path: Path, cache: Path) -> None:
    path, booster = _lightgbm(tmp_path)
    _fastest(path, _native(booster))
    (kept,) = _libraries()
    kept.chmod(0o666)
    loads: list[int] = []

    def load() -> Trees:
        loads.append(1)
        return Trees(_native(booster), WIDTH, {})

    assert fastest(path, "lightgbm", load, threads=1, mode=True).native
    assert loads == [1]


def test_the_cache_folder_is_made_private(tmp_path: Path, cache: Path) -> None:
    path, booster = _lightgbm(tmp_path)
    _fastest(path, _native(booster))
    assert cache_dir().stat().st_mode & 0o777 == 0o700
    assert all(kept.stat().st_mode & 0o077 == 0 for kept in cache_dir().glob("lightgbm-*"))


def test_a_slow_first_load_says_what_it_is_doing(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, booster = _lightgbm(tmp_path)
    monkeypatch.setattr(loops, "PATIENCE_SECONDS", 0.0)
    with caplog.at_level(logging.WARNING, logger="thresher.models"):
        _fastest(path, _native(booster))
        time.sleep(0.1)
    assert "compiling its trees" in caplog.text


@pytest.mark.parametrize("llvm", [True, False])
def test_the_manifest_records_whether_the_trees_ran_compiled(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, llvm: bool
) -> None:
    import pyarrow.parquet as pq

    import thresher

    path, _ = _lightgbm(tmp_path)
    columns = [f"f{i}" for i in range(WIDTH)]
    table = pa.table({"id": np.arange(500), **dict(zip(columns, _rows(500).T, strict=True))})
    pq.write_table(table, tmp_path / "in.parquet")
    if not llvm:
        monkeypatch.setitem(sys.modules, "llvmlite", None)  # the library's predict instead
    result = thresher.run(
        {
            "source": {"uri": str(tmp_path / "in.parquet"), "id_column": "id", "columns": columns},
            "model": {"kind": "lightgbm", "uri": str(path)},
            "sink": {"uri": str(tmp_path / "out")},
            "run": {"workers": 1},
        },
        store=f"sqlite:///{tmp_path / 'store.db'}",
    )
    assert result.succeeded, result.problems
    assert result.manifest["native"] is llvm


def test_a_model_whose_first_load_is_slow_says_it_is_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from thresher.models import LoadContext, load_model
    from thresher.spec import ModelSection

    (tmp_path / "slow.py").write_text(
        "import time\n\nclass Slow:\n    def __init__(self):\n        time.sleep(0.3)\n\n"
        "    def predict(self, batch):\n        return {'prediction': batch.column(0)}\n"
    )
    monkeypatch.setattr(loops, "PATIENCE_SECONDS", 0.05)
    spec = ModelSection(kind="python", uri=f"{tmp_path / 'slow.py'}:Slow")
    with caplog.at_level(logging.WARNING, logger="thresher.models"):
        load_model(spec, LoadContext(features=("x",)))
    assert "slow.py:Slow: loading the python model..." in caplog.text
    caplog.clear()
    monkeypatch.setattr(loops, "PATIENCE_SECONDS", 5.0)
    with caplog.at_level(logging.WARNING, logger="thresher.models"):
        load_model(spec, LoadContext(features=("x",)))
    assert "loading" not in caplog.text  # a load within the patience says nothing
