"""Model adapters: one contract for every kind, then each adapter's refusals and edges."""

from __future__ import annotations

import operator
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pyarrow as pa
import pytest
import skops.io
from onnx import TensorProto, helper
from skl2onnx import to_onnx
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

import thresher.models
from thresher.arrays import to_matrix
from thresher.errors import ModelLoadError, ModelOutputError
from thresher.models import ADAPTERS, LoadContext, load_model, model_fingerprint
from thresher.models.outputs import as_columns, proba_names
from thresher.spec import ModelSection

FEATURES = ("f0", "f1", "f2", "f3")
CONTEXT = LoadContext(features=FEATURES, threads=1)

PYTHON_MODELS = """
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc


class PandasModel:
    def __init__(self, factor=1.0):
        self.factor = factor
        self.ready = False

    def setup(self):
        self.ready = True

    def predict(self, batch):
        assert self.ready and isinstance(batch, pd.DataFrame)
        return pd.DataFrame({"prediction": self.factor * batch["f0"] + batch["f1"]})


class NumpyModel(PandasModel):
    def predict(self, batch):
        assert isinstance(batch, dict)
        ones = [1] * len(batch["f0"])
        return {"prediction": self.factor * batch["f0"] + batch["f1"], "ones": ones}


class ArrowModel(PandasModel):
    def predict(self, batch):
        assert isinstance(batch, pa.Table)
        return pc.add(pc.multiply(batch["f0"], self.factor), batch["f1"])


class NoPredict:
    pass
"""


@dataclass(frozen=True)
class Data:
    x: np.ndarray
    frame: pd.DataFrame
    table: pa.Table
    labels: np.ndarray
    target: np.ndarray


@pytest.fixture(scope="module")
def data() -> Data:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(120, len(FEATURES)))
    labels = np.where(x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=0.3, size=120) > 0, "yes", "no")
    target = x @ np.array([1.0, -2.0, 0.5, 0.0]) + 3.0
    frame = pd.DataFrame(x, columns=list(FEATURES))
    # Two record batches, so the adapters meet multi-chunk columns as the engine sends them.
    table = pa.Table.from_batches(pa.Table.from_pandas(frame).to_batches(max_chunksize=70))
    return Data(x, frame, table, labels, target)


Case = Callable[[Data, Path], tuple[ModelSection, dict[str, np.ndarray]]]


def sklearn_skops(data: Data, tmp: Path) -> tuple[ModelSection, dict[str, np.ndarray]]:
    model = LogisticRegression().fit(data.x, data.labels)
    skops.io.dump(model, tmp / "model.skops")
    spec = ModelSection(
        kind="sklearn", uri=str(tmp / "model.skops"), outputs=["prediction", "proba"]
    )
    proba = model.predict_proba(data.x)
    return spec, {
        "prediction": model.predict(data.x),
        "proba_no": proba[:, 0],
        "proba_yes": proba[:, 1],
    }


def sklearn_joblib(data: Data, tmp: Path) -> tuple[ModelSection, dict[str, np.ndarray]]:
    model = Ridge().fit(data.frame, data.target)  # fitted on names: gets a DataFrame back
    joblib.dump(model, tmp / "model.joblib")
    spec = ModelSection(kind="sklearn", uri=str(tmp / "model.joblib"), trust=True)
    return spec, {"prediction": model.predict(data.frame)}


def onnx_regressor(data: Data, tmp: Path) -> tuple[ModelSection, dict[str, np.ndarray]]:
    x32 = data.x.astype(np.float32)
    path = _save_onnx(to_onnx(LinearRegression().fit(x32, data.target), x32[:1]), tmp)
    (direct,) = _session(path).run(None, {"X": x32})
    return ModelSection(kind="onnx", uri=str(path)), {"prediction": direct.ravel()}


def onnx_classifier(data: Data, tmp: Path) -> tuple[ModelSection, dict[str, np.ndarray]]:
    x32 = data.x.astype(np.float32)
    model = LogisticRegression().fit(x32, data.labels)
    path = _save_onnx(to_onnx(model, x32[:1], options={"zipmap": False}), tmp)
    label, proba = _session(path).run(None, {"X": x32})
    spec = ModelSection(
        kind="onnx",
        uri=str(path),
        outputs=["prediction", "proba"],
        options={"classes": ["no", "yes"]},
    )
    return spec, {"prediction": label, "proba_no": proba[:, 0], "proba_yes": proba[:, 1]}


def onnx_zipmap(data: Data, tmp: Path) -> tuple[ModelSection, dict[str, np.ndarray]]:
    x32 = data.x.astype(np.float32)
    path = _save_onnx(to_onnx(LogisticRegression().fit(x32, data.labels), x32[:1]), tmp)
    label, rows = _session(path).run(None, {"X": x32})
    spec = ModelSection(kind="onnx", uri=str(path), outputs=["prediction", "proba"])
    expected = {f"proba_{c}": np.array([row[c] for row in rows]) for c in ("no", "yes")}
    return spec, {"prediction": label, **expected}


def _python(batch_format: str, cls: str) -> Case:
    def case(data: Data, tmp: Path) -> tuple[ModelSection, dict[str, np.ndarray]]:
        (tmp / "user_models.py").write_text(PYTHON_MODELS)
        spec = ModelSection(
            kind="python",
            uri=f"{tmp / 'user_models.py'}:{cls}",
            batch_format=batch_format,  # type: ignore[arg-type]
            options={"factor": 2.0},
        )
        expected = {"prediction": 2.0 * data.x[:, 0] + data.x[:, 1]}
        if cls == "NumpyModel":
            expected["ones"] = np.ones(len(data.x), dtype=np.int64)
        return spec, expected

    return case


CASES: dict[str, Case] = {
    "sklearn-skops": sklearn_skops,
    "sklearn-joblib-trusted": sklearn_joblib,
    "onnx-regressor": onnx_regressor,
    "onnx-classifier": onnx_classifier,
    "onnx-classifier-zipmap": onnx_zipmap,
    "python-pandas": _python("pandas", "PandasModel"),
    "python-numpy": _python("numpy", "NumpyModel"),
    "python-arrow": _python("arrow", "ArrowModel"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_adapter_output_equals_direct_model_call(case: str, data: Data, tmp_path: Path) -> None:
    spec, expected = CASES[case](data, tmp_path)
    columns = load_model(spec, CONTEXT).predict(data.table)
    assert sorted(columns) == sorted(expected)
    for name, want in expected.items():
        got = _values(columns[name])
        assert got.shape == (data.table.num_rows,), name  # one value per row, never 2-D
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_skops_with_untrusted_types_loads_only_when_trusted(data: Data, tmp_path: Path) -> None:
    model = make_pipeline(FunctionTransformer(operator.neg), LogisticRegression())
    model.fit(data.x, data.labels)
    skops.io.dump(model, tmp_path / "model.skops")
    spec = ModelSection(kind="sklearn", uri=str(tmp_path / "model.skops"))
    with pytest.raises(ModelLoadError, match=r"_operator\.neg.*model\.trust = true"):
        load_model(spec, CONTEXT)
    trusted = load_model(spec.model_copy(update={"trust": True}), CONTEXT)
    assert list(trusted.predict(data.table)["prediction"]) == list(model.predict(data.x))


@pytest.mark.parametrize("suffix", [".joblib", ".pkl", ".pickle"])
def test_pickles_need_trust(suffix: str, data: Data, tmp_path: Path) -> None:
    joblib.dump(Ridge().fit(data.x, data.target), tmp_path / f"model{suffix}")
    spec = ModelSection(kind="sklearn", uri=str(tmp_path / f"model{suffix}"))
    with pytest.raises(ModelLoadError, match=r"runs whatever code.*model\.trust = true"):
        load_model(spec, CONTEXT)


def test_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(ModelLoadError, match="onnx, python") as caught:
        load_model(ModelSection(kind="tensorflw", uri="m"), CONTEXT)
    assert caught.value.stage == "load"


def test_third_party_loader_by_dotted_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: Data
) -> None:
    (tmp_path / "acme_adapters.py").write_text(
        textwrap.dedent("""
        import numpy as np

        class Constant:
            def __init__(self, value):
                self.value = value

            def predict(self, batch):
                return {"prediction": np.full(batch.num_rows, self.value)}

        def load_constant(spec, context):
            return Constant(spec.options["value"] * context.threads)
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "acme_adapters", raising=False)
    spec = ModelSection(kind="acme_adapters:load_constant", uri="-", options={"value": 3})
    model = load_model(spec, LoadContext(features=FEATURES, threads=2))
    assert set(model.predict(data.table)["prediction"]) == {6}
    with pytest.raises(ModelLoadError, match="no loader function 'load_nothing'"):
        load_model(spec.model_copy(update={"kind": "acme_adapters:load_nothing"}), CONTEXT)
    with pytest.raises(ModelLoadError, match="cannot import no_such_module"):
        load_model(spec.model_copy(update={"kind": "no_such_module:load"}), CONTEXT)
    sys.modules.pop("acme_adapters", None)


def test_feature_names_must_match_the_fitted_ones(data: Data, tmp_path: Path) -> None:
    model = Ridge().fit(data.frame, data.target)
    skops.io.dump(model, tmp_path / "model.skops")
    spec = ModelSection(kind="sklearn", uri=str(tmp_path / "model.skops"))
    with pytest.raises(ModelLoadError, match=r"lack \['f3'\] and add \['age'\]"):
        load_model(spec, LoadContext(features=("f0", "f1", "f2", "age")))
    # The same names in another order are fine: the frame is built in the fitted order.
    reordered = load_model(spec, LoadContext(features=tuple(reversed(FEATURES))))
    batch = data.table.select(list(reversed(FEATURES)))
    np.testing.assert_allclose(reordered.predict(batch)["prediction"], model.predict(data.frame))


def test_feature_count_must_match_a_matrix_model(data: Data, tmp_path: Path) -> None:
    skops.io.dump(Ridge().fit(data.x, data.target), tmp_path / "model.skops")
    spec = ModelSection(kind="sklearn", uri=str(tmp_path / "model.skops"))
    with pytest.raises(ModelLoadError, match="fitted on 4 features, but the job gives it 2"):
        load_model(spec, LoadContext(features=("f0", "f1")))


def test_proba_alone_omits_prediction_and_needs_a_classifier(data: Data, tmp_path: Path) -> None:
    spec, _ = sklearn_skops(data, tmp_path)
    only_proba = load_model(spec.model_copy(update={"outputs": ["proba"]}), CONTEXT)
    assert sorted(only_proba.predict(data.table)) == ["proba_no", "proba_yes"]
    regressor, _ = onnx_regressor(data, tmp_path)
    with pytest.raises(ModelLoadError, match="no probability output"):
        load_model(regressor.model_copy(update={"outputs": ["proba"]}), CONTEXT)
    skops.io.dump(Ridge().fit(data.x, data.target), tmp_path / "ridge.skops")
    ridge = ModelSection(kind="sklearn", uri=str(tmp_path / "ridge.skops"), outputs=["proba"])
    with pytest.raises(ModelLoadError, match="Ridge has no predict_proba"):
        load_model(ridge, CONTEXT)


def test_onnx_classifier_without_proba_skips_it_and_names_by_index(
    data: Data, tmp_path: Path
) -> None:
    spec, _ = onnx_classifier(data, tmp_path)
    without_proba = load_model(spec.model_copy(update={"outputs": ["prediction"]}), CONTEXT)
    assert list(without_proba.predict(data.table)) == ["prediction"]
    unnamed = load_model(spec.model_copy(update={"options": {}}), CONTEXT)
    assert sorted(unnamed.predict(data.table)) == ["prediction", "proba_0", "proba_1"]


def test_onnx_graph_with_one_input_per_column(data: Data, tmp_path: Path) -> None:
    inputs = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, [None, 1]) for n in ("f1", "f0")]
    output = helper.make_tensor_value_info("total", TensorProto.DOUBLE, [None, 1])
    graph = helper.make_graph(
        [helper.make_node("Sub", ["f1", "f0"], ["total"])], "g", inputs, [output]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = _save_onnx(model, tmp_path)
    columns = load_model(ModelSection(kind="onnx", uri=str(path)), CONTEXT).predict(data.table)
    np.testing.assert_allclose(columns["prediction"], data.x[:, 1] - data.x[:, 0])
    with pytest.raises(ModelLoadError, match=r"lack \['f1'\]"):
        load_model(ModelSection(kind="onnx", uri=str(path)), LoadContext(features=("f0",)))


def test_python_model_refusals(tmp_path: Path) -> None:
    (tmp_path / "user_models.py").write_text(PYTHON_MODELS)
    base = f"{tmp_path / 'user_models.py'}"
    cases = {
        f"{base}:NoPredict": "has no predict",
        f"{base}:Missing": "has no Missing",
        f"{base}:pd": "is a module, not a class",
        f"{tmp_path / 'absent.py'}:Model": "is not a file",
        "PandasModel": "should be pkg.module:Class",
    }
    for uri, message in cases.items():
        with pytest.raises(ModelLoadError, match=message):
            load_model(ModelSection(kind="python", uri=uri), CONTEXT)
    wrong_options = ModelSection(kind="python", uri=f"{base}:PandasModel", options={"fator": 2})
    with pytest.raises(ModelLoadError, match=r"model\.options: PandasModel"):
        load_model(wrong_options, CONTEXT)


def test_a_model_file_is_hashed_once_per_version(tmp_path: Path) -> None:
    """A job fingerprints its model twice (its earlier jobs, its manifest): one read."""
    import hashlib
    import os

    from thresher.models import _file_digest

    model = tmp_path / "m.onnx"
    model.write_bytes(b"weights one")
    spec = ModelSection(kind="onnx", uri=str(model))
    before = _file_digest.cache_info()
    first = model_fingerprint(spec)["sha256"]
    assert model_fingerprint(spec)["sha256"] == first == hashlib.sha256(b"weights one").hexdigest()
    after = _file_digest.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)
    stat = model.stat()
    model.write_bytes(b"weights two")  # same size, rewritten in place
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert model_fingerprint(spec)["sha256"] == hashlib.sha256(b"weights two").hexdigest()


def test_python_model_by_module_path_and_fingerprints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: Data
) -> None:
    package = tmp_path / "acme_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "scoring.py").write_text(PYTHON_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = ModelSection(kind="python", uri="acme_pkg.scoring:ArrowModel")
    digest = model_fingerprint(spec)["sha256"]
    assert "acme_pkg" not in sys.modules  # found without running the package
    assert (
        digest
        == model_fingerprint(
            ModelSection(kind="python", uri=f"{package / 'scoring.py'}:ArrowModel")
        )["sha256"]
    )
    assert digest is not None and len(digest) == 64
    assert model_fingerprint(ModelSection(kind="python", uri="no_such_pkg.m:X"))["sha256"] is None
    assert model_fingerprint(ModelSection(kind="onnx", uri="s3://b/m.onnx")) == {
        "uri": "s3://b/m.onnx",
        "sha256": None,
    }
    with pytest.raises(ModelLoadError, match="RuntimeError: imported"):
        load_model(spec, CONTEXT)


def test_outputs_become_one_dimensional_columns() -> None:
    columns = as_columns({"embedding": np.ones((3, 2)), "score": np.zeros((3, 1))})
    assert isinstance(columns["embedding"], pa.FixedSizeListArray)
    assert columns["embedding"].type.list_size == 2
    assert np.asarray(columns["score"]).shape == (3,)
    assert list(as_columns(pd.Series([1, None], dtype="Int64"))["prediction"].to_pylist()) == [
        1,
        None,
    ]
    with pytest.raises(ModelOutputError, match="is a int"):
        as_columns(3)
    with pytest.raises(ModelOutputError, match="shape"):
        as_columns({"cube": np.zeros((2, 2, 2))})
    assert proba_names(["a b", "a-b", 1]) == ["proba_a_b", "proba_a_b_1", "proba_1"]


def test_to_matrix_fills_nulls_with_nan_across_chunks() -> None:
    table = pa.table({"a": pa.chunked_array([[1, None], [3]]), "b": [0.5, 1.5, 2.5]})
    matrix = to_matrix(table, np.float32)
    assert matrix.dtype == np.float32 and matrix.shape == (3, 2)
    np.testing.assert_array_equal(matrix, [[1, 0.5], [np.nan, 1.5], [3, 2.5]])


def test_public_names_and_lazy_imports() -> None:
    assert thresher.models.__all__ == [
        "ADAPTERS",
        "LoadContext",
        "Model",
        "ModelLoader",
        "check_model_section",
        "load_model",
        "model_fingerprint",
    ]
    assert sorted(ADAPTERS) == [
        "lightgbm",
        "llm",
        "mlflow",
        "object",
        "onnx",
        "python",
        "sentence-transformers",
        "sklearn",
        "torch",
        "transformers",
        "vision",
        "xgboost",
    ]
    heavy = "{'sklearn', 'onnxruntime', 'skops', 'pandas', 'PIL', 'simplejpeg'}"
    script = f"import sys, thresher.models; print(sorted({heavy} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def _save_onnx(model: onnx.ModelProto, tmp: Path) -> Path:
    path = tmp / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _session(path: Path) -> Any:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _values(column: Any) -> np.ndarray:
    if isinstance(column, pa.Array | pa.ChunkedArray):
        return np.asarray(column.to_numpy(zero_copy_only=False))
    return np.asarray(column)
