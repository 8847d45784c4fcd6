"""scikit-learn estimators (and pipelines) saved with skops, or as pickles when trusted.

- `.skops` loads with `skops.io.load`. Types skops does not trust by default can run
  code when loaded, so a file holding any is refused, naming them, unless
  `model.trust = true`.
- `.joblib`, `.pkl`, `.pickle` load only with `model.trust = true`: unpickling runs
  whatever code the file holds.

An estimator fitted on a DataFrame (it has `feature_names_in_`) gets a DataFrame with
those names, so its column checks and ColumnTransformers work; any other gets a float64
matrix. With `outputs = ["prediction", "proba"]` a classifier is run once: `predict_proba`
gives the `proba_<class>` columns and `prediction` is the most probable class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

from thresher.arrays import to_matrix
from thresher.errors import ModelLoadError
from thresher.models.base import Column, LoadContext, Model
from thresher.models.features import to_frame
from thresher.models.outputs import as_column, proba_columns, proba_names
from thresher.spec import ModelSection

SKOPS_SUFFIXES = (".skops",)
PICKLE_SUFFIXES = (".joblib", ".pkl", ".pickle")


def load_sklearn(spec: ModelSection, context: LoadContext) -> Model:
    """Load the estimator at `spec.uri` and check it against the job's features.

    Raises ModelLoadError for a missing file, an unknown suffix, untrusted content,
    features that differ from the ones the model was fitted on, or `proba` asked of a
    model without `predict_proba`.
    """
    estimator = read_estimator(Path(spec.uri), spec.trust, spec.trusted_types)
    if not callable(getattr(estimator, "predict", None)):
        raise ModelLoadError(
            f"model.uri: {spec.uri} holds a {type(estimator).__name__}, which has no predict();"
            " save the fitted estimator or pipeline itself"
        )
    return SklearnModel(estimator, spec.outputs, context)


def read_estimator(path: Path, trust: bool, trusted_types: Sequence[str] = ()) -> Any:
    """The object saved at `path`, refusing code-running content unless `trust` (or, for
    skops, unless each such type is listed in `trusted_types`)."""
    if not path.is_file():
        raise ModelLoadError(f"model.uri: {path} is not a file; point it at the saved model")
    suffix = path.suffix.lower()
    if suffix in SKOPS_SUFFIXES:
        return _read_skops(path, trust, trusted_types)
    if suffix in PICKLE_SUFFIXES:
        return _read_pickle(path, trust)
    known = ", ".join(SKOPS_SUFFIXES + PICKLE_SUFFIXES)
    raise ModelLoadError(f"model.uri: {path.name} has an unknown suffix; expected one of {known}")


class SklearnModel:
    """A loaded estimator; `predict` turns each Arrow batch into its output columns."""

    def __init__(self, estimator: Any, outputs: Sequence[str], context: LoadContext) -> None:
        self._estimator = estimator
        self._input_names = _input_names(estimator, context.features)
        self._want_prediction = "prediction" in outputs
        self._proba_names = _proba_names(estimator, outputs)
        self._classes = np.asarray(getattr(estimator, "classes_", []))
        self._threads = context.threads
        # Created once: discovering the loaded BLAS/OpenMP libraries costs more than a
        # small batch, while setting their limits around each call is cheap.
        self._threadpools = ThreadpoolController()

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """Output columns for one batch of feature rows."""
        if self._input_names is None:
            inputs: Any = to_matrix(batch)
        else:
            inputs = to_frame(batch.select(self._input_names))
        with self._threadpools.limit(limits=self._threads):
            if self._proba_names is None:
                return {"prediction": as_column(np.asarray(self._estimator.predict(inputs)))}
            proba = self._estimator.predict_proba(inputs)
        columns: dict[str, Column] = dict(proba_columns(self._proba_names, np.asarray(proba)))
        if self._want_prediction:
            # predict() would run the model a second time; for classifiers it is the most
            # probable class. (SVC with probability=True is the known exception: its
            # Platt-scaled probabilities can disagree with its decision function.)
            columns["prediction"] = self._classes[np.argmax(proba, axis=1)]
        return columns


def _read_skops(path: Path, trust: bool, trusted_types: Sequence[str] = ()) -> Any:
    import skops.io

    untrusted = skops.io.get_untrusted_types(file=path)
    unreviewed = [t for t in untrusted if t not in trusted_types]
    if unreviewed and not trust:
        listed = ", ".join(f'"{t}"' for t in unreviewed)
        raise ModelLoadError(
            f"model.uri: {path.name} holds types skops does not trust by default, and"
            f" loading them can run their code: {', '.join(unreviewed)}. If you have"
            f" reviewed them, set model.trusted_types = [{listed}]; if you trust the whole"
            " file, set model.trust = true"
        )
    return skops.io.load(path, trusted=untrusted or None)


def _read_pickle(path: Path, trust: bool) -> Any:
    if not trust:
        raise ModelLoadError(
            f"model.uri: {path.name} is a pickle, and loading a pickle runs whatever code it"
            " holds. Set model.trust = true if you made this file or trust whoever did, or"
            " save the model with skops.io.dump(model, 'model.skops') to load it safely"
        )
    import joblib

    # joblib.load reads plain pickles as well as joblib's own files, whatever the suffix.
    return joblib.load(path)


def _input_names(estimator: Any, features: Sequence[str]) -> list[str] | None:
    """The column names the estimator was fitted with, or None if it takes a bare matrix.

    An empty `features` means the job did not say, and nothing can be checked.
    """
    fitted = getattr(estimator, "feature_names_in_", None)
    if fitted is None:
        expected = getattr(estimator, "n_features_in_", None)
        if features and expected is not None and expected != len(features):
            raise ModelLoadError(
                f"source.columns: the model was fitted on {expected} features, but the job"
                f" gives it {len(features)} ({', '.join(features)})"
            )
        return None
    names = [str(name) for name in fitted]
    given, fitted_names = set(features), set(names)  # sets: linear for wide models
    missing = [name for name in names if name not in given]
    unused = [name for name in features if name not in fitted_names]
    if features and (missing or unused):
        raise ModelLoadError(
            f"source.columns: the model was fitted on columns {names}; the job's features"
            f" lack {missing} and add {unused}. Make source.columns the model's columns"
        )
    return names


def _proba_names(estimator: Any, outputs: Sequence[str]) -> list[str] | None:
    if "proba" not in outputs:
        return None
    name = type(estimator).__name__
    if not hasattr(estimator, "predict_proba"):
        raise ModelLoadError(
            f"model.outputs: 'proba' asks for class probabilities, but {name} has no"
            " predict_proba(); remove 'proba' from model.outputs"
        )
    classes = getattr(estimator, "classes_", None)
    if classes is None or np.ndim(classes) != 1:
        raise ModelLoadError(
            f"model.outputs: {name} has no single list of classes (a multi-output"
            " classifier?), so 'proba' cannot name its columns; remove 'proba'"
        )
    return proba_names(classes)
