"""Gradient-boosted trees from their native files: XGBoost and LightGBM.

- `kind = "xgboost"`: a Booster saved as `.json` or `.ubj` (`booster.save_model`, or
  `XGBClassifier.save_model`).
- `kind = "lightgbm"`: a Booster saved as `.txt` (`booster.save_model`, or
  `LGBMClassifier.booster_.save_model`).

Both formats hold trees and numbers only, so they load safely without `model.trust`.
Both are compiled to machine code in process by LLVM, which llvmlite's wheel carries: no C
compiler (`model.options.compile`, see `trees/compiled.py`): the same predictions,
several times faster.

The objective saved in the file says what the output is. A regressor (or any objective
that is not a class probability) gives `prediction`. A probabilistic classifier
(xgboost `binary:logistic` / `multi:softprob`, lightgbm `binary` / `multiclass`) gives
`prediction`, the most probable class, and with `proba` in `model.outputs` one
`proba_<class>` column per class; a binary model's single output is the probability of
class 1, so `proba_0 = 1 - proba_1`. The files hold class indices, not labels: classes are
0, 1, … unless `model.options.classes` lists the labels in index order.

A model trained on named columns (a DataFrame) gets its columns by name, in its own order.
Both run with `context.threads` threads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.arrays import to_matrix
from thresher.errors import ModelLoadError
from thresher.models.base import Column, LoadContext, Model
from thresher.models.outputs import as_column, proba_columns, proba_names
from thresher.spec import ModelSection
from thresher.trees.compiled import Trees, compile_option, fastest
from thresher.trees.forest import Frontend

XGBOOST_SUFFIXES = (".json", ".ubj")
LIGHTGBM_SUFFIXES = (".txt",)
XGBOOST_PROBA = frozenset({"binary:logistic", "multi:softprob"})
LIGHTGBM_PROBA = frozenset({"binary", "multiclass", "softmax", "multiclassova", "ova"})


@dataclass(frozen=True)
class Facts:
    """What a booster file says of its output and inputs (kept as JSON with a compiled
    library, see `compiled_trees.Trees`)."""

    objective: str
    classes: int  # 0: one plain value per row; k: k class probabilities
    names: Sequence[str] | None  # the training columns' names, when it was given names


def load_xgboost(spec: ModelSection, context: LoadContext) -> Model:
    """Load an XGBoost Booster from its native file; see the module docstring."""
    path = _model_file(spec.uri, XGBOOST_SUFFIXES, "booster.save_model('model.json')")

    def load() -> Trees:
        import xgboost

        return xgboost_trees(xgboost.Booster(model_file=str(path)), context.threads)

    return _booster_model(path, "xgboost", load, spec, context)


def xgboost_trees(booster: Any, threads: int) -> Trees:
    """A loaded XGBoost Booster, run by its own predict."""
    booster.set_param({"nthread": threads})
    learner = json.loads(booster.save_config())["learner"]
    objective = learner["objective"]["name"]
    classes = 0  # class labels (multi:softmax) or margins are a plain value per row
    if objective in XGBOOST_PROBA:
        classes = max(int(learner["learner_model_param"].get("num_class", "0")), 2)
    facts = Facts(objective, classes, booster.feature_names)

    def native(features: pa.Table) -> Any:
        return booster.inplace_predict(to_matrix(features))

    return Trees(native, booster.num_features(), asdict(facts))


def load_lightgbm(spec: ModelSection, context: LoadContext) -> Model:
    """Load a LightGBM Booster from its native text file; see the module docstring."""
    path = _model_file(spec.uri, LIGHTGBM_SUFFIXES, "booster.save_model('model.txt')")

    def load() -> Trees:
        import lightgbm

        return lightgbm_trees(lightgbm.Booster(model_file=str(path)), context.threads)

    return _booster_model(path, "lightgbm", load, spec, context)


def lightgbm_trees(booster: Any, threads: int) -> Trees:
    """A loaded LightGBM Booster, run by its own predict."""
    objective = str(booster.params.get("objective", "regression")).split()[0]
    classes = 0
    if objective in LIGHTGBM_PROBA:
        classes = max(int(booster.params.get("num_class", 1)), 2)
    names = booster.feature_name()
    # Trained on a bare matrix, LightGBM names the columns Column_0, Column_1, …
    named = names if names != [f"Column_{i}" for i in range(len(names))] else None

    def native(features: pa.Table) -> Any:
        return booster.predict(to_matrix(features), num_threads=threads)

    return Trees(native, booster.num_feature(), asdict(Facts(objective, classes, named)))


def _booster_model(
    path: Path,
    frontend: Frontend,
    load: Callable[[], Trees],
    spec: ModelSection,
    context: LoadContext,
) -> Model:
    mode = compile_option(spec.options)
    trees = fastest(path, frontend, load, threads=context.threads, mode=mode)
    return BoosterModel(trees, spec, context)


class BoosterModel:
    """A loaded booster; `predict` runs it on each batch's feature columns."""

    def __init__(self, trees: Trees, spec: ModelSection, context: LoadContext) -> None:
        facts = Facts(**trees.facts)
        _check_outputs(facts, spec)
        self._run = trees.predict
        self.native = trees.native  # compiled by LLVM, or the library's predict (RunsNative)
        self._input_names = _input_names(facts, trees.width, context.features)
        self._classes = facts.classes
        labels = spec.options.get("classes", list(range(facts.classes)))
        self._labels = np.asarray(labels)
        self._want_prediction = "prediction" in spec.outputs
        self._proba_names = proba_names(labels) if "proba" in spec.outputs else None

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """Output columns for one batch of feature rows."""
        inputs = batch if self._input_names is None else batch.select(self._input_names)
        raw = np.asarray(self._run(inputs))
        if not self._classes:
            return {"prediction": as_column(raw)}
        proba = np.column_stack([1.0 - raw, raw]) if raw.ndim == 1 else raw
        columns: dict[str, Column] = {}
        if self._proba_names is not None:
            columns.update(proba_columns(self._proba_names, proba))
        if self._want_prediction:
            columns["prediction"] = self._labels[np.argmax(proba, axis=1)]
        return columns


def _model_file(uri: str, suffixes: tuple[str, ...], how: str) -> Path:
    path = Path(uri)
    if not path.is_file():
        raise ModelLoadError(f"model.uri: {uri} is not a file; point it at the saved booster")
    if path.suffix.lower() not in suffixes:
        raise ModelLoadError(
            f"model.uri: {path.name} is not a native booster file ({', '.join(suffixes)});"
            f" save it with {how}"
        )
    return path


def _check_outputs(facts: Facts, spec: ModelSection) -> None:
    if "proba" in spec.outputs and not facts.classes:
        raise ModelLoadError(
            f"model.outputs: 'proba' asks for class probabilities, but the objective"
            f" {facts.objective!r} does not give them; remove 'proba'"
        )
    labels = spec.options.get("classes")
    if facts.classes and labels is not None and len(labels) != facts.classes:
        raise ModelLoadError(
            f"model.options.classes: lists {len(labels)} labels, but the model has"
            f" {facts.classes} classes"
        )


def _input_names(facts: Facts, width: int, features: Sequence[str]) -> list[str] | None:
    """The training columns to select, in training order; None to pass the batch as is.

    An empty `features` means the job did not say, and nothing can be checked.
    """
    if facts.names and features:
        given = set(features)  # a set: linear for a model of thousands of columns
        missing = [name for name in facts.names if name not in given]
        if missing or len(features) != len(facts.names):
            raise ModelLoadError(
                f"source.columns: the model was trained on columns {list(facts.names)}; the job's"
                f" features ({', '.join(features)}) lack {missing}. Make source.columns the"
                " model's columns"
            )
        return list(facts.names)
    if features and width != len(features):
        raise ModelLoadError(
            f"source.columns: the model was trained on {width} features, but the job"
            f" gives it {len(features)} ({', '.join(features)})"
        )
    return None
