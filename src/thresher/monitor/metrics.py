"""Quality metrics over joined rows, each one scikit-learn's own function on the same rows.

Classification (labels and predictions compared as text, the classes being the labels
and predictions seen, sorted):

- binary (at most two classes, or two `proba_` columns): precision, recall and F1 of the
  positive class — the second `proba_` column's class (scikit-learn's `classes_[1]`),
  else the greater of the two classes (numerically, when both are numbers);
- multiclass: precision, recall and F1 macro-averaged over the classes, ROC AUC
  one-vs-rest macro-averaged;
- ROC AUC and log loss from the `proba_<class>` columns, when the job wrote them and
  every label has one;
- calibration: 10 equal-width bins of the predicted probability — of the positive class
  (binary), of the most probable class (multiclass) — each with its mean predicted
  probability, the observed share of rows where that class is the label, and the count;
  bin i holds p with i/10 < p <= (i+1)/10, the first one 0 too, as
  `sklearn.calibration.calibration_curve(strategy="uniform")`.

Regression: MAE, RMSE (`root_mean_squared_error`) and R².

A metric that cannot be computed on the rows (one class only, no probabilities) is None,
with a note saying why.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from thresher.errors import MonitorError

__all__ = [
    "CALIBRATION_BINS",
    "CalibrationBin",
    "ClassificationMetrics",
    "RegressionMetrics",
    "calibration_bins",
    "classification_metrics",
    "regression_metrics",
]

CALIBRATION_BINS = 10


@dataclass(frozen=True)
class CalibrationBin:
    """Rows whose predicted probability is in (lower, upper]: their mean predicted
    probability, the share of them whose label is that class, and how many there are."""

    lower: float
    upper: float
    mean_predicted: float | None
    observed: float | None
    count: int


@dataclass(frozen=True)
class ClassificationMetrics:
    """`average` is "binary" (of `positive`) or "macro"; None: not computable, see notes."""

    accuracy: float
    precision: float | None
    recall: float | None
    f1: float | None
    roc_auc: float | None
    log_loss: float | None
    average: str
    positive: str | None
    classes: tuple[str, ...]
    calibration: tuple[CalibrationBin, ...] = ()


@dataclass(frozen=True)
class RegressionMetrics:
    mae: float
    rmse: float
    r2: float | None


def sklearn_metrics() -> Any:
    """`sklearn.metrics`, or an error saying how to install it."""
    try:
        import sklearn.metrics
    except ImportError as exc:
        raise MonitorError(
            "quality metrics need scikit-learn: pip install 'thresher[sklearn]'"
        ) from exc
    return sklearn.metrics


def classification_metrics(
    labels: np.ndarray,
    predictions: np.ndarray,
    proba: np.ndarray | None,
    proba_classes: tuple[str, ...],
    notes: list[str],
) -> ClassificationMetrics:
    """Metrics of text `labels` against text `predictions`; `proba` (rows by classes) in
    `proba_classes` order, or None. Why a metric is None goes to `notes`."""
    m = sklearn_metrics()
    classes = tuple(str(c) for c in np.unique(np.concatenate([labels, predictions])))
    binary = len(classes) <= 2 and (proba is None or len(proba_classes) == 2)
    positive = None
    if binary:
        positive = proba_classes[1] if proba is not None else _greater(classes)
    average = "binary" if binary else "macro"
    scores: dict[str, Any] = {"average": average, "zero_division": 0}
    if binary:
        scores["pos_label"] = positive
    precision = _safely(notes, "precision", m.precision_score, labels, predictions, **scores)
    recall = _safely(notes, "recall", m.recall_score, labels, predictions, **scores)
    f1 = _safely(notes, "f1", m.f1_score, labels, predictions, **scores)
    roc_auc, log_loss, calibration = _from_proba(labels, proba, proba_classes, positive, notes)
    return ClassificationMetrics(
        accuracy=float(m.accuracy_score(labels, predictions)),
        precision=precision,
        recall=recall,
        f1=f1,
        roc_auc=roc_auc,
        log_loss=log_loss,
        average=average,
        positive=positive,
        classes=classes,
        calibration=calibration,
    )


def _from_proba(
    labels: np.ndarray,
    proba: np.ndarray | None,
    proba_classes: tuple[str, ...],
    positive: str | None,
    notes: list[str],
) -> tuple[float | None, float | None, tuple[CalibrationBin, ...]]:
    """ROC AUC, log loss and calibration bins from the class probabilities."""
    if proba is None:
        notes.append("roc_auc, log_loss, calibration: the job wrote no proba_ columns")
        return None, None, ()
    if missing := sorted(set(labels.tolist()) - set(proba_classes)):
        notes.append(f"roc_auc, log_loss, calibration: label {missing[0]!r} has no proba_ column")
        return None, None, ()
    m = sklearn_metrics()
    names = sorted(proba_classes)  # scikit-learn wants the labels sorted
    ordered = proba[:, [proba_classes.index(c) for c in names]]
    if positive is not None:
        pos = proba[:, proba_classes.index(positive)]
        truth = labels == positive
        roc_auc = _safely(notes, "roc_auc", m.roc_auc_score, truth, pos)
        calibration = calibration_bins(truth, pos)
    else:
        roc_auc = _safely(notes, "roc_auc", m.roc_auc_score, labels, ordered,
                          multi_class="ovr", average="macro", labels=names)  # fmt: skip
        top = np.argmax(proba, axis=1)
        calibration = calibration_bins(
            np.array(proba_classes)[top] == labels, proba[np.arange(len(top)), top]
        )
    log_loss = _safely(notes, "log_loss", m.log_loss, labels, ordered, labels=names)
    return roc_auc, log_loss, calibration


def regression_metrics(
    labels: np.ndarray, predictions: np.ndarray, notes: list[str]
) -> RegressionMetrics:
    """MAE, RMSE and R² of float `predictions` against float `labels`."""
    m = sklearn_metrics()
    return RegressionMetrics(
        mae=float(m.mean_absolute_error(labels, predictions)),
        rmse=float(m.root_mean_squared_error(labels, predictions)),
        r2=_safely(notes, "r2", m.r2_score, labels, predictions),
    )


def calibration_bins(truth: np.ndarray, probability: np.ndarray) -> tuple[CalibrationBin, ...]:
    """CALIBRATION_BINS equal-width bins of `probability`, each with the mean
    probability, the share of `truth`, and the count (empty bins have None)."""
    edges = np.linspace(0.0, 1.0, CALIBRATION_BINS + 1)
    index = np.searchsorted(edges[1:-1], probability)  # as calibration_curve bins them
    counts = np.bincount(index, minlength=CALIBRATION_BINS)
    sums = np.bincount(index, weights=probability, minlength=CALIBRATION_BINS)
    hits = np.bincount(index, weights=truth.astype(float), minlength=CALIBRATION_BINS)
    return tuple(
        CalibrationBin(
            lower=float(edges[i]),
            upper=float(edges[i + 1]),
            mean_predicted=float(sums[i] / counts[i]) if counts[i] else None,
            observed=float(hits[i] / counts[i]) if counts[i] else None,
            count=int(counts[i]),
        )
        for i in range(CALIBRATION_BINS)
    )


def _greater(classes: tuple[str, ...]) -> str:
    """The positive class of a binary task without probabilities: the greater class (as
    numbers when both are), the only one if one."""
    if not classes:
        return ""
    try:
        return max(classes, key=float)
    except ValueError:
        return max(classes)


def _safely(notes: list[str], name: str, metric: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """`metric(*args, **kw)` as a float, or None with a note when scikit-learn refuses or
    warns that the value is undefined on these rows."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            value = float(metric(*args, **kw))
        except (ValueError, Warning) as exc:
            notes.append(f"{name}: {str(exc).splitlines()[0]}")
            return None
    if np.isnan(value):
        notes.append(f"{name}: undefined on these rows")
        return None
    return value
