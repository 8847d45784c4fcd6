"""MLflow models: any pyfunc model saved on local disk, loaded with `mlflow.pyfunc.load_model`.

    [model]
    kind = "mlflow"
    uri = "models/churn"                 # a folder holding an MLmodel file
    trust = true

Loading a pyfunc model can unpickle code: a custom `python_model` is cloudpickled, many
flavors pickle their estimator, and `code_paths` are imported. Which of these a folder
does is up to whoever saved it, so thresher loads every MLflow model only with
`model.trust = true`. To load without trust, export the model to a safe format first
(ONNX, skops, a native booster file, a torch.export program).

A registry or run uri (`models:/churn/3`, `runs:/…`) needs a tracking server, which a
worker should not depend on: fetch it once with `mlflow.artifacts.download_artifacts` and
point `uri` at the folder.

The model gets the feature columns as a pandas DataFrame, with their own dtypes so its
signature (if it has one) accepts them; what it returns (a DataFrame, Series, array or
list) becomes columns as for `kind = "python"`. The scientific libraries it uses are
limited to `context.threads` threads through threadpoolctl when that is installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from thresher.errors import ModelLoadError
from thresher.models.base import Column, LoadContext, Model
from thresher.models.outputs import as_columns
from thresher.spec import ModelSection


def load_mlflow(spec: ModelSection, context: LoadContext) -> Model:
    """Load the pyfunc model in the folder `spec.uri`, only with `model.trust = true`.

    Raises ModelLoadError without trust, for a folder without an MLmodel file, or when
    `proba` is asked (a pyfunc model has only `predict`).
    """
    if not spec.trust:
        raise ModelLoadError(
            f"model.trust: loading the MLflow model {spec.uri} can run code it holds"
            " (pickled models, cloudpickled python_model, code_paths). Set model.trust = true"
            " if you trust whoever saved it, or export it to ONNX or skops to load it safely"
        )
    if "proba" in spec.outputs:
        raise ModelLoadError(
            "model.outputs: a pyfunc model has only predict(), so thresher writes what it"
            " returns; remove 'proba' (return probabilities from predict() instead)"
        )
    folder = Path(spec.uri)
    if not (folder / "MLmodel").is_file():
        raise ModelLoadError(
            f"model.uri: {spec.uri} is not an MLflow model folder (it has no MLmodel file);"
            " for models:/ or runs:/ uris, download the model first with"
            " mlflow.artifacts.download_artifacts(uri, dst_path=...)"
        )
    with warnings.catch_warnings():
        # mlflow warns about its own type hints while importing; nothing a user can act on.
        warnings.filterwarnings(
            "ignore", message=".*Any type hint is inferred as AnyType", category=UserWarning
        )
        import mlflow.pyfunc

    return MlflowModel(mlflow.pyfunc.load_model(str(folder)), context.threads)


class MlflowModel:
    """A loaded pyfunc model; `predict` hands it each batch as a DataFrame."""

    def __init__(self, pyfunc: Any, threads: int) -> None:
        self._pyfunc = pyfunc
        self._threads = threads
        self._threadpools: Any = None
        if importlib.util.find_spec("threadpoolctl") is not None:
            from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

            # Created once: finding the loaded BLAS/OpenMP libraries is the slow part.
            self._threadpools = ThreadpoolController()

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """The model's predict on this batch, normalized to named columns."""
        frame = batch.to_pandas()
        limit = (
            self._threadpools.limit(limits=self._threads)
            if self._threadpools is not None
            else contextlib.nullcontext()
        )
        with limit:
            result = self._pyfunc.predict(frame)
        if hasattr(result, "columns") and hasattr(result, "rename"):
            # DataFrames from predict() often have integer column names (0, 1, …).
            result = result.rename(columns=str)
        return as_columns(result)
