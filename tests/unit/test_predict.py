"""`thresher.predict` with data and models in memory (inmemory/): the predictions equal the
model's own, in the input's order and kind; a bad row is named with its index; options
are the spec's own; and `thresher.run` / `resume` record such a job in the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import thresher
from thresher.errors import BadInputError, JobFailed, SpecError
from thresher.store import JobState


def frame(rows: int = 1_000, seed: int = 0) -> pd.DataFrame:
    """Four features and a label, on a shuffled index (so order and index both count)."""
    rng = np.random.default_rng(seed)
    data = pd.DataFrame(rng.normal(size=(rows, 4)), columns=["a", "b", "c", "d"])
    data.index = rng.permutation(rows) + 10_000
    return data


def label(data: pd.DataFrame) -> np.ndarray:
    return (data["a"] + 0.5 * data["b"] > 0).astype(int).to_numpy()


@pytest.fixture(scope="module")
def classifier() -> LogisticRegression:
    data = frame(seed=1)
    return LogisticRegression().fit(data, label(data))


def test_pandas_in_pandas_out_on_the_input_index(classifier: LogisticRegression) -> None:
    data = frame()
    scored = thresher.predict(data, classifier)
    assert isinstance(scored, pd.DataFrame)
    assert scored.index.equals(data.index)
    assert list(scored.columns) == ["prediction"]
    assert np.array_equal(scored["prediction"].to_numpy(), classifier.predict(data))


def test_polars_in_polars_out(classifier: LogisticRegression) -> None:
    data = frame()
    scored = thresher.predict(pl.from_pandas(data), classifier, outputs=["proba"])
    assert isinstance(scored, pl.DataFrame)
    assert scored.columns == ["proba_0", "proba_1"]
    # Labels are exact; probabilities to the last bits a batch's BLAS blocking changes.
    np.testing.assert_allclose(scored.to_numpy(), classifier.predict_proba(data), rtol=1e-12)


@pytest.mark.parametrize("shape", ["table", "reader", "dataset"])
def test_arrow_in_arrow_out(classifier: LogisticRegression, shape: str) -> None:
    import pyarrow.dataset as ds

    data = frame()
    table = pa.Table.from_pandas(data, preserve_index=False)
    given: Any = {
        "table": table,
        "reader": pa.RecordBatchReader.from_batches(table.schema, table.to_batches(100)),
        "dataset": ds.dataset(table),
    }[shape]
    scored = thresher.predict(given, classifier)
    assert isinstance(scored, pa.Table)
    assert scored.column("prediction").to_numpy().tolist() == classifier.predict(data).tolist()


def test_a_path_in_arrow_out_with_the_id(classifier: LogisticRegression, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    data = frame().reset_index(names="customer")
    pq.write_table(pa.Table.from_pandas(data, preserve_index=False), tmp_path / "in.parquet")
    scored = thresher.predict(
        tmp_path / "in.parquet", classifier, id_column="customer", columns=["a", "b", "c", "d"]
    )
    by_id = dict(zip(scored["customer"].to_pylist(), scored["prediction"].to_pylist(), strict=True))
    expected = classifier.predict(data[["a", "b", "c", "d"]])
    assert by_id == dict(zip(data["customer"].tolist(), expected.tolist(), strict=True))


def test_an_id_column_is_kept_and_the_order_too(classifier: LogisticRegression) -> None:
    data = frame().reset_index(names="customer")
    scored = thresher.predict(data, classifier, id_column="customer", columns=["a", "b", "c", "d"])
    assert scored["customer"].tolist() == data["customer"].tolist()
    assert np.array_equal(scored["prediction"], classifier.predict(data[["a", "b", "c", "d"]]))


def test_a_pipeline_a_function_and_a_ray_data_class() -> None:
    data = frame()
    pipeline = make_pipeline(StandardScaler(), LinearRegression()).fit(data, data["a"] * 2)
    np.testing.assert_allclose(
        thresher.predict(data, pipeline)["prediction"].to_numpy(), pipeline.predict(data), 1e-12
    )

    def doubled(batch: pd.DataFrame) -> dict[str, Any]:
        return {"twice": batch["a"] * 2}

    assert np.array_equal(
        thresher.predict(data, doubled, batch_format="pandas")["twice"], data["a"] * 2
    )

    class RayStyle:  # Ray Data's map_batches shape: load in __init__, arrays by name out
        def __init__(self) -> None:
            self.weight = 3.0

        def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {"score": batch["b"] * self.weight}

    scored = thresher.predict(data, RayStyle, batch_format="numpy")
    assert np.array_equal(scored["score"].to_numpy(), data["b"].to_numpy() * 3.0)


def test_a_bad_row_is_named_by_its_index(
    classifier: LogisticRegression, caplog: pytest.LogCaptureFixture
) -> None:
    data = frame(50).astype(object)
    bad = data.index[7]
    data.loc[bad, "c"] = "n/a"
    with pytest.raises(BadInputError, match=r"column 'c': 'n/a' is not a number") as raised:
        thresher.predict(data, classifier)
    errors = raised.value.errors  # type: ignore[attr-defined]
    assert errors.column("index").to_pylist() == [bad]
    assert errors.column("row").to_pylist() == [7]
    kept = raised.value.predictions  # type: ignore[attr-defined]
    assert list(kept.index) == [i for i in data.index if i != bad]

    skipped = thresher.predict(data, classifier, on_bad_input="skip")
    assert len(skipped) == 49 and bad not in skipped.index
    assert "1 bad row(s)" in caplog.text


def test_options_are_the_spec_s_own(classifier: LogisticRegression) -> None:
    with pytest.raises(SpecError, match="batch_sise: not an option"):
        thresher.predict(frame(), classifier, batch_sise=10)
    with pytest.raises(SpecError, match="columns"):
        thresher.predict(frame(), classifier, columns=["a", "nope"])
    with pytest.raises(SpecError, match="data: a list"):
        thresher.predict([1, 2, 3], classifier)


def test_an_object_without_predict_is_refused_naming_what_to_pass() -> None:
    with pytest.raises(Exception, match="neither predict"):
        thresher.predict(frame(), object())


def test_small_inputs_add_little_over_the_model_s_own_predict(
    classifier: LogisticRegression,
) -> None:
    """Not a timing test (benchmarks/ measures): the call runs in this process, on the
    object itself, with no worker started."""
    import threading

    before = {t.ident for t in threading.enumerate()}
    thresher.predict(frame(), classifier)
    assert {t.ident for t in threading.enumerate()} <= before | {None}


def test_run_records_the_job_and_reads_back(
    classifier: LogisticRegression, tmp_path: Path, private_store: str
) -> None:
    data = frame()
    result = thresher.run(data=data, model=classifier, sink=str(tmp_path / "scores"))
    assert result.succeeded
    assert thresher.JobResult is type(result)
    output = result.to_pandas().sort_values("_row")
    assert np.array_equal(output["prediction"].to_numpy(), classifier.predict(data))
    assert result.errors.num_rows == 0
    from thresher.store import open_store

    assert open_store(private_store).job(result.job_id).state == JobState.SUCCEEDED


def test_run_puts_bad_rows_in_errors_and_raises_only_when_the_job_fails(
    classifier: LogisticRegression, tmp_path: Path
) -> None:
    data = frame(100).astype(object)
    data.iloc[3, 0] = "three"
    result = thresher.run(data=data, model=classifier, sink=str(tmp_path / "scores"))
    assert result.manifest["rows_out"] == 99
    [error] = result.errors.to_pylist()
    assert error["row"] == 3 and error["stage"] == "read" and "'three'" in error["message"]

    # More bad records than the job allows fail it: JobFailed carries the result.
    def broken(batch: Any) -> Any:
        raise RuntimeError("the model broke")

    with pytest.raises(JobFailed, match="rows were bad") as failed:
        thresher.run(data=frame(), model=broken, sink=str(tmp_path / "broken"), max_error_rate=0.1)
    result = failed.value.result  # type: ignore[attr-defined]
    assert not result.succeeded
    with pytest.raises(JobFailed):
        result.to_arrow()  # a failed job's output reads as an error, not an empty table
    quiet = thresher.run(
        data=frame(),
        model=broken,
        sink=str(tmp_path / "broken"),
        max_error_rate=0.1,
        raise_on_failure=False,
    )
    assert quiet.state == JobState.FAILED
    # The folder itself reads as an error too, naming why, until a job publishes there.
    with pytest.raises(Exception, match="JOB_FAILED"):
        pd.read_parquet(tmp_path / "broken")
    assert "ended without publishing" in (tmp_path / "broken" / "JOB_FAILED").read_text()
    thresher.run(data=frame(), model=classifier, sink=str(tmp_path / "broken"))
    assert len(pd.read_parquet(tmp_path / "broken")) == 1_000
    assert not (tmp_path / "broken" / "JOB_FAILED").exists()


def test_resume_wants_the_same_data_and_model(
    classifier: LogisticRegression, tmp_path: Path
) -> None:
    data = frame()
    result = thresher.run(data=data, model=classifier, sink=str(tmp_path / "scores"))
    with pytest.raises(SpecError, match="data: not the data this job was planned with"):
        thresher.resume(result.job_id, data=frame(seed=5), model=classifier)
    other = LogisticRegression().fit(data, 1 - label(data))
    with pytest.raises(SpecError, match="model: not the model"):
        thresher.resume(result.job_id, data=data, model=other)


def test_each_run_reads_an_input_file_of_its_own_and_removes_it(
    classifier: LogisticRegression, tmp_path: Path, private_store: str
) -> None:
    # Two scripts scoring the same frame at once once shared one file named by its content:
    # the first job to end removed it under the other (its shards then failed, file not found).
    from thresher.store import open_store

    data = frame()
    inputs = []
    for name in ("first", "second"):
        result = thresher.run(data=data, model=classifier, sink=str(tmp_path / name))
        inputs.append(Path(open_store(private_store).job(result.job_id).spec.source.uri))
    assert inputs[0].name == inputs[1].name  # the data's fingerprint, as `resume` checks it
    assert inputs[0].parent != inputs[1].parent
    assert not inputs[0].exists() and not inputs[0].parent.exists()
    assert not list(inputs[0].parent.parent.glob("*/*.partial"))
