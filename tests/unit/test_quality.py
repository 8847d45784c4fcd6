"""Quality over joined rows equals scikit-learn's own metrics on the same rows: binary
and multiclass classification from `proba_` columns, regression; the task inferred or
forced; coverage, lag and the trend across the jobs of one name."""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from sklearn import metrics
from sklearn.calibration import calibration_curve

from thresher.errors import MonitorError
from thresher.monitor.actuals import add_actuals
from thresher.monitor.labels import LabelledIds, from_table
from thresher.monitor.metrics import ClassificationMetrics, RegressionMetrics
from thresher.monitor.quality import QualityTrend, job_quality, quality
from thresher.store import Store

FinishedJob = Callable[..., str]
ROWS = 3000


def label_part(ids: np.ndarray, labels: np.ndarray, name: str = "labels") -> LabelledIds:
    return from_table(pa.table({"id": ids, "label": labels}), name, "id", "label")


def binary_job(finished_job: FinishedJob, rng: np.random.Generator) -> tuple[str, np.ndarray]:
    """A job scoring ids 0..ROWS-1 with P(class 1); returns it and the true labels."""
    p1 = rng.uniform(size=ROWS)
    output = pa.table(
        {
            "id": np.arange(ROWS),
            "prediction": (p1 > 0.5).astype(np.int64),
            "proba_0": 1 - p1,
            "proba_1": p1,
        }
    )
    truth = (rng.uniform(size=ROWS) < p1 * 0.8 + 0.1).astype(np.int64)
    return finished_job(output), truth


def test_binary_metrics_equal_sklearns(store: Store, finished_job: FinishedJob) -> None:
    rng = np.random.default_rng(0)
    job, truth = binary_job(finished_job, rng)
    labelled = rng.choice(ROWS, size=2000, replace=False)  # quality is over these rows only
    add_actuals(store, job, label_part(labelled, truth[labelled]))
    result = job_quality(store, job)
    assert result.task == "classification" and result.labelled == 2000
    assert result.coverage == pytest.approx(2000 / ROWS)
    got = result.metrics
    assert isinstance(got, ClassificationMetrics)
    assert (got.average, got.positive) == ("binary", "1")
    p1 = np.asarray(_output(store, job).column("proba_1"))[labelled]
    y, pred = truth[labelled], (p1 > 0.5).astype(np.int64)
    assert got.accuracy == pytest.approx(metrics.accuracy_score(y, pred))
    assert got.precision == pytest.approx(metrics.precision_score(y, pred))
    assert got.recall == pytest.approx(metrics.recall_score(y, pred))
    assert got.f1 == pytest.approx(metrics.f1_score(y, pred))
    assert got.roc_auc == pytest.approx(metrics.roc_auc_score(y, p1))
    assert got.log_loss == pytest.approx(metrics.log_loss(y, np.column_stack([1 - p1, p1])))
    observed, predicted = calibration_curve(y, p1, n_bins=10, strategy="uniform")
    filled = [b for b in got.calibration if b.count]
    assert [b.observed for b in filled] == pytest.approx(list(observed))
    assert [b.mean_predicted for b in filled] == pytest.approx(list(predicted))
    assert sum(b.count for b in got.calibration) == 2000


def test_multiclass_metrics_are_macro_and_equal_sklearns(
    store: Store, finished_job: FinishedJob
) -> None:
    rng = np.random.default_rng(1)
    classes = np.array(["cat", "dog", "not bird"])
    proba = rng.dirichlet([1.0, 1.0, 1.0], size=ROWS)
    output = pa.table(
        {
            "id": pa.array([f"c{i}" for i in range(ROWS)]),
            "prediction": classes[proba.argmax(axis=1)],
            "proba_cat": proba[:, 0],
            "proba_dog": proba[:, 1],
            "proba_not_bird": proba[:, 2],
        }
    )
    job = finished_job(output)
    truth = np.array([rng.choice(classes, p=row) for row in proba])
    ids = np.array([f"c{i}" for i in range(ROWS)])
    add_actuals(store, job, label_part(ids, truth))
    got = job_quality(store, job).metrics
    assert isinstance(got, ClassificationMetrics) and got.average == "macro"
    pred = classes[proba.argmax(axis=1)]
    assert got.classes == ("cat", "dog", "not bird")
    assert got.accuracy == pytest.approx(metrics.accuracy_score(truth, pred))
    assert got.precision == pytest.approx(metrics.precision_score(truth, pred, average="macro"))
    assert got.recall == pytest.approx(metrics.recall_score(truth, pred, average="macro"))
    assert got.f1 == pytest.approx(metrics.f1_score(truth, pred, average="macro"))
    assert got.roc_auc == pytest.approx(
        metrics.roc_auc_score(truth, proba, multi_class="ovr", labels=list(classes))
    )
    assert got.log_loss == pytest.approx(metrics.log_loss(truth, proba, labels=list(classes)))
    top = proba.max(axis=1)
    observed, predicted = calibration_curve(pred == truth, top, n_bins=10)
    filled = [b for b in got.calibration if b.count]
    assert [b.observed for b in filled] == pytest.approx(list(observed))
    assert [b.mean_predicted for b in filled] == pytest.approx(list(predicted))


def test_regression_metrics_equal_sklearns(store: Store, finished_job: FinishedJob) -> None:
    rng = np.random.default_rng(2)
    prediction = rng.normal(size=ROWS)
    job = finished_job(pa.table({"id": np.arange(ROWS), "prediction": prediction}))
    truth = prediction + rng.normal(scale=0.3, size=ROWS)
    add_actuals(store, job, label_part(np.arange(ROWS), truth))
    result = job_quality(store, job)
    got = result.metrics
    assert result.task == "regression" and isinstance(got, RegressionMetrics)
    assert got.mae == pytest.approx(metrics.mean_absolute_error(truth, prediction))
    assert got.rmse == pytest.approx(metrics.root_mean_squared_error(truth, prediction))
    assert got.r2 == pytest.approx(metrics.r2_score(truth, prediction))


def test_the_task_is_inferred_and_can_be_forced(store: Store, finished_job: FinishedJob) -> None:
    counts = pa.table({"id": [1, 2, 3, 4], "prediction": pa.array([1, 2, 2, 5], pa.int64())})
    job = finished_job(counts)
    add_actuals(store, job, label_part(np.array([1, 2, 3, 4]), np.array([1, 2, 3, 5])))
    assert job_quality(store, job).task == "classification"  # integers of few values
    forced = job_quality(store, job, task="regression").metrics
    assert isinstance(forced, RegressionMetrics) and forced.mae == pytest.approx(0.25)
    fractions = finished_job(counts)
    add_actuals(store, fractions, label_part(np.array([1, 2]), np.array([1.5, 2.0])))
    assert job_quality(store, fractions).task == "regression"


def test_undefined_metrics_are_none_with_a_note(store: Store, finished_job: FinishedJob) -> None:
    rng = np.random.default_rng(3)
    job, _ = binary_job(finished_job, rng)
    add_actuals(store, job, label_part(np.arange(10), np.ones(10, np.int64)))
    result = job_quality(store, job)
    assert isinstance(result.metrics, ClassificationMetrics)
    assert result.metrics.roc_auc is None
    assert any(note.startswith("roc_auc:") for note in result.notes), result.notes
    no_proba = finished_job(pa.table({"id": [1, 2], "prediction": ["a", "b"]}))
    add_actuals(store, no_proba, label_part(np.array([1, 2]), np.array(["a", "a"])))
    plain = job_quality(store, no_proba)
    assert isinstance(plain.metrics, ClassificationMetrics) and plain.metrics.log_loss is None
    assert plain.metrics.accuracy == 0.5 and "no proba_ columns" in plain.notes[-1]


def test_a_job_without_actuals_has_counts_and_no_metrics(
    store: Store, finished_job: FinishedJob
) -> None:
    job = finished_job(pa.table({"id": [1, 2], "prediction": [0.5, 0.7]}))
    result = job_quality(store, job)
    assert (result.metrics, result.labelled, result.predicted, result.coverage) == (
        None,
        0,
        2,
        0.0,
    )
    assert result.lag is None and result.parts == 0


def test_lag_and_the_trend_across_a_jobs_name(store: Store, finished_job: FinishedJob) -> None:
    table = pa.table({"id": [1, 2, 3], "prediction": [1.0, 2.0, 3.0]})
    older, newer = finished_job(table, name="nightly"), finished_job(table, name="nightly")
    finished_job(table, name="other")
    add_actuals(store, older, label_part(np.array([1]), np.array([1.5]), "a"))
    add_actuals(store, older, label_part(np.array([2]), np.array([2.0]), "b"))
    one = job_quality(store, older)
    assert one.parts == 2 and one.lag is not None
    assert 0 <= one.lag.first <= one.lag.median <= one.lag.last
    trend = quality(store, "nightly")
    assert isinstance(trend, QualityTrend)
    assert [q.job_id for q in trend.jobs] == [older, newer]
    assert [q.labelled for q in trend.jobs] == [2, 0]
    assert trend.to_json()["jobs"][0]["metrics"]["mae"] == pytest.approx(0.25)
    with pytest.raises(MonitorError, match="no succeeded job named or scheduled 'nope'"):
        quality(store, "nope")


def test_without_scikit_learn_the_error_says_what_to_install(
    store: Store, finished_job: FinishedJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = finished_job(pa.table({"id": [1, 2], "prediction": [0.5, 0.7]}))
    add_actuals(store, job, label_part(np.array([1]), np.array([1.0])))
    monkeypatch.setitem(sys.modules, "sklearn.metrics", None)
    with pytest.raises(MonitorError, match=r"pip install 'thresher\[sklearn\]'"):
        job_quality(store, job)


def _output(store: Store, job: str) -> pa.Table:
    from thresher.sinks import open_sink

    return pa.concat_tables(open_sink(store.job(job).spec.sink).read_output())
