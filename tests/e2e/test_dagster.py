"""thresher jobs as Dagster assets, materialised in process by `dagster.materialize()` on
real files with a real scikit-learn model (worker processes included): the metadata of a
materialisation, a drifted job whose blocking check keeps the asset downstream from
running, a failed job failing its asset, a quality check once actuals arrive, and the
same asset through a real `thresher serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import thresher
from thresher.integrations.dagster import (
    ThresherResource,
    thresher_asset,
    thresher_quality_check,
)

from .servers import Server, ServiceSite
from .support import ID, KEEP, Workspace, labels, make_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROWS = 3000


def spec(workspace: Workspace, table: pa.Table, name: str, model: dict[str, Any]) -> dict[str, Any]:
    data = workspace.write_input(table, "parquet", name)
    return {
        "job": {"name": "scores"},
        "source": {"uri": str(data), "id_column": ID, "shard_bytes": 65536},
        "model": model,
        "run": {"workers": 2},
        "sink": {"uri": str(workspace.root / f"out-{name}"), "keep_columns": [KEEP]},
    }


@pytest.fixture
def setting(workspace: Workspace) -> tuple[Workspace, dict[str, Any], str, str]:
    """A trained model's section, a store, and a baseline job run on the training data."""
    table = make_table(ROWS)
    trained = workspace.sklearn_skops(table)
    model = {**trained.section, "uri": str(trained.file)}
    store = f"sqlite:///{workspace.root / 'store.db'}"
    baseline = thresher.run(spec(workspace, table, "train", model), store, progress=False)
    return workspace, model, store, baseline.job_id


def downstream_of(asset: str, seen: list[str]) -> Any:
    @dg.asset(deps=[asset], name=f"after_{asset}")
    def after() -> None:
        seen.append(asset)

    return after


def test_materialise_records_the_job_and_runs_downstream(setting: Any) -> None:
    workspace, model, store, baseline = setting
    tonight = spec(workspace, make_table(ROWS, seed=5), "tonight", model)
    scores = thresher_asset(tonight, name="scores", baseline=baseline, max_error_rate=0.01)
    seen: list[str] = []

    result = dg.materialize(
        [scores, downstream_of("scores", seen)],
        resources={"thresher": ThresherResource(store=store)},
    )

    assert result.success
    (event,) = result.asset_materializations_for_node("scores")
    metadata = {key: value.value for key, value in event.metadata.items()}
    assert metadata["rows_in"] == metadata["rows_out"] == ROWS
    assert metadata["rows_error"] == 0
    assert metadata["drift_verdict"] in ("ok", "warn")
    assert metadata["baseline"] == baseline
    assert metadata["output"] == str(workspace.root / "out-tonight")
    assert metadata["manifest"]["rows_out"] == ROWS
    assert thresher.profile(metadata["job_id"], store).columns  # profiled in the same pass
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"error_rate": True, "drift": True}
    assert seen == ["scores"]


def test_drift_blocks_downstream(setting: Any) -> None:
    workspace, model, store, baseline = setting
    table = make_table(ROWS, seed=7)
    index = table.schema.get_field_index("f0")
    moved = table.set_column(index, "f0", pc.add(table.column("f0"), 4.0))
    scores = thresher_asset(
        spec(workspace, moved, "moved", model), name="scores", baseline=baseline
    )
    seen: list[str] = []

    result = dg.materialize(
        [scores, downstream_of("scores", seen)],
        resources={"thresher": ThresherResource(store=store)},
        raise_on_error=False,
    )

    (event,) = result.asset_materializations_for_node("scores")
    assert event.metadata["drift_verdict"].value == "drift"
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"error_rate": True, "drift": False}
    assert seen == []  # the blocking check failed: nothing downstream read the predictions
    assert not result.success


def test_a_failed_job_fails_its_asset(setting: Any, workspace: Workspace) -> None:
    _, model, store, _ = setting
    broken = spec(workspace, make_table(200, seed=9), "broken", model)
    broken["model"] = {**model, "uri": str(workspace.root / "no-such-model.skops")}
    scores = thresher_asset(broken, name="scores")

    result = dg.materialize(
        [scores],
        resources={"thresher": ThresherResource(store=store)},
        raise_on_error=False,
    )

    assert not result.success
    assert result.asset_materializations_for_node("scores") == []


def test_quality_check_once_actuals_arrive(setting: Any) -> None:
    workspace, model, store, _ = setting
    table = make_table(ROWS, seed=11)
    scores = thresher_asset(spec(workspace, table, "labelled", model), name="scores")
    auc = thresher_quality_check(scores, "roc_auc", at_least=0.8)
    resources = {"thresher": ThresherResource(store=store)}
    with dg.DagsterInstance.ephemeral() as instance:
        first = dg.materialize([scores, auc], resources=resources, instance=instance)
        (event,) = first.asset_materializations_for_node("scores")
        job_id = str(event.metadata["job_id"].value)
        early = quality_of(first)
        assert early.passed  # no actuals yet: nothing to judge, and it says so
        assert early.metadata["note"].value == "no actuals yet"
        ids, truth = table.column(ID).to_pylist(), labels(table)
        actuals = [{"id": i, "label": int(y)} for i, y in zip(ids, truth, strict=True)]
        thresher.add_actuals(job_id, actuals, store=store)

        checked = dg.materialize(
            [scores, auc],
            resources=resources,
            instance=instance,
            selection=dg.AssetSelection.checks(auc),
        )

    late = quality_of(checked)
    assert late.passed
    assert late.metadata["roc_auc"].value > 0.8
    assert checked.asset_materializations_for_node("scores") == []  # the check alone ran


def quality_of(result: Any) -> Any:
    (found,) = (
        c for c in result.get_asset_check_evaluations() if c.check_name == "quality_roc_auc"
    )
    return found


def test_through_a_server(tmp_path: Path) -> None:
    site = ServiceSite(tmp_path / "site")
    (site.shared / "in.jsonl").write_text(
        "".join(f'{{"id": {i}, "x": {i}}}\n' for i in range(50)), encoding="utf-8"
    )
    server = Server(site)
    try:
        body = {
            "model": "double",
            "source": {"uri": str(site.shared / "in.jsonl")},
            "id_column": "id",
        }
        scores = thresher_asset(body, name="scores", max_error_rate=0.0)
        resource = ThresherResource(server=server.url, token=site.token("acme"), poll_seconds=0.2)
        result = dg.materialize([scores], resources={"thresher": resource})
    finally:
        server.stop()

    (event,) = result.asset_materializations_for_node("scores")
    assert event.metadata["rows_out"].value == 50
    assert event.metadata["output"].value.startswith(server.url + "/v1/jobs/")
    assert {c.check_name: c.passed for c in result.get_asset_check_evaluations()} == {
        "error_rate": True
    }
