"""Overwrite deletes only what is provably thresher's, through the real `thresher run`:
a Spark or Hadoop output folder (`_SUCCESS` among other files) is not thresher's, an
empty or root `sink.uri` is a spec error, and no sink may hold the job store or the
job's own input, `force` or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import FAST, ID, Workspace, make_table

pytestmark = pytest.mark.e2e

MODEL = """
class Doubler:
    def predict(self, batch):
        return {"prediction": 2.0 * batch["f0"]}
"""


def spec(workspace: Workspace, source: str, sink: str, **extra: object) -> Path:
    (workspace.root / "model.py").write_text(MODEL, encoding="utf-8")
    return workspace.spec(
        {
            "source": {"uri": source, "id_column": ID},
            "model": {"kind": "python", "uri": "model.py:Doubler"},
            "sink": {"uri": sink, **extra},
        }
    )


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_overwrite_into_a_spark_folder_is_refused_without_force_and_deletes_nothing(
    workspace: Workspace,
) -> None:
    workspace.write_input(make_table(200), "parquet")
    spark = workspace.root / "spark-out"
    spark.mkdir()
    (spark / "_SUCCESS").write_bytes(b"")  # what every Spark or Hadoop job leaves
    (spark / "part-00000-1a2b.snappy.parquet").write_bytes(b"another system's output")
    (spark / "notes.txt").write_text("keep me", encoding="utf-8")
    before = contents(spark)

    refused = workspace.run("run", spec(workspace, "customers.parquet", "spark-out/"), *FAST)
    assert refused.returncode == 1, refused.stderr
    assert "thresher did not write it" in refused.stderr and "sink.force" in refused.stderr
    assert contents(spark) == before


@pytest.mark.parametrize("uri", ["/", "", "//", "file:///"])
def test_an_empty_or_root_sink_uri_exits_2_naming_sink_uri(workspace: Workspace, uri: str) -> None:
    workspace.write_input(make_table(50), "parquet")
    (workspace.root / "keep.txt").write_text("keep me", encoding="utf-8")
    job = spec(workspace, "customers.parquet", uri)
    before = contents(workspace.root)
    # Without force: code that took the path would refuse the folder (exit 1).
    result = workspace.run("run", job, *FAST)
    assert result.returncode == 2, result.stderr
    assert "sink.uri" in result.stderr and "Traceback" not in result.stderr
    assert contents(workspace.root) == before


def test_a_sink_at_the_stores_folder_exits_2_even_with_force(workspace: Workspace) -> None:
    workspace.write_input(make_table(50), "parquet")
    state = workspace.root / "state"
    state.mkdir()
    store = f"sqlite:///{state / 'store.db'}"
    job = spec(workspace, "customers.parquet", str(state), force=True)
    assert workspace.run("--store", store, "status").returncode == 0  # the store is made
    before = contents(state)

    result = workspace.run("--store", store, "run", job, *FAST)
    assert result.returncode == 2, result.stderr
    assert "sink.uri" in result.stderr and "store" in result.stderr
    assert contents(state).keys() >= before.keys()  # the live store is still there
    assert workspace.run("--store", store, "status").returncode == 0
    # A folder holding the store's folder is refused too.
    above = workspace.run("--store", store, "run", job, *FAST, "--set", f"sink.uri={state}/..")
    assert above.returncode == 2, above.stderr


def test_a_sink_over_the_jobs_own_input_exits_2_even_with_force(workspace: Workspace) -> None:
    data = workspace.root / "data"
    data.mkdir()
    source = workspace.write_input(make_table(200), "parquet", name="data/customers")
    before = source.read_bytes()

    result = workspace.run("run", spec(workspace, "data/customers.parquet", "data", force=True))
    assert result.returncode == 2, result.stderr
    assert "sink.uri" in result.stderr and "source" in result.stderr
    assert source.read_bytes() == before
