"""Table triggers: each new run of a Delta table's versions is one set (one row a version
in the trigger ledger) and one job reading what those versions added; a version is
taken once, by one of two watchers on one store, and again only after a reset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from thresher.service import submission
from thresher.service.background.watcher import Watcher
from thresher.service.config import ConfigError, ServerConfig, prepare
from thresher.service.state import ServiceState
from thresher.service.triggers import check_triggers
from thresher.spec import ModelSection
from thresher.store import open_store
from thresher.triggers.settings import TriggerSettings
from thresher.triggers.tables import TableVersion, VersionRun

MODEL = "class M:\n    def predict(self, batch):\n        return {'prediction': batch['x']}\n"
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def site(tmp_path: Path, **trigger: Any) -> ServiceState:
    (tmp_path / "m.py").write_text(MODEL)
    table = tmp_path / "shared" / "lake" / "events"
    table.parent.mkdir(parents=True)
    settings = {"watch": str(table), "table": "delta", "poll_seconds": 1, **trigger}
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            models={"m": ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")},
            allowed_roots=[str(tmp_path / "shared")],
            triggers={"events": {"tenant": "acme", "job": {"model": "m", "id_column": "id"},
                                 **settings}},
        )
    )  # fmt: skip
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    return ServiceState(store=store, config=config, data_dir=config.data_dir)


def append(state: ServiceState, ids: range) -> None:
    table = pa.table({"id": pa.array(ids, pa.int64()), "x": [float(i) for i in ids]})
    write_deltalake(state.config.triggers["events"].watch, table, mode="append")


def watcher(state: ServiceState) -> Watcher:
    return Watcher(state, lambda tenant, body, key: submission.submit_job(state, tenant, body, key))


def runs(state: ServiceState) -> list[list[int]]:
    found = [j.spec.source.options["versions"] for j in state.store.jobs(100)]
    return sorted(list(v) for v in found)


def test_each_run_of_new_versions_is_one_job(tmp_path: Path) -> None:
    state = site(tmp_path)
    w = watcher(state)
    w.look(T0)  # no table yet: nothing
    assert runs(state) == []
    append(state, range(0, 3))
    append(state, range(3, 5))
    w.look(T0 + timedelta(seconds=1))
    append(state, range(5, 9))
    w.look(T0 + timedelta(seconds=2))
    w.look(T0 + timedelta(seconds=3))  # nothing new: no new job
    assert runs(state) == [[0, 1], [2, 2]]
    (job, *_) = state.store.jobs(100)
    assert job.tenant == "acme" and job.name.startswith("events@")
    assert job.spec.source.format == "delta"
    assert state.store.triggers.files_seen() == {"events": 3}  # versions


def test_two_watchers_on_one_store_take_each_version_once(tmp_path: Path) -> None:
    state = site(tmp_path)
    other = ServiceState(
        store=open_store(state.store.url), config=state.config, data_dir=state.data_dir
    )
    append(state, range(0, 3))
    first, second = watcher(state), watcher(other)
    first.look(T0)
    second.look(T0)  # version 0 is taken: nothing new for it
    append(state, range(3, 5))
    second.look(T0 + timedelta(seconds=1))
    first.look(T0 + timedelta(seconds=1))  # it reads what the other took: nothing new
    assert runs(state) == [[0, 0], [1, 1]]
    table = state.config.triggers["events"].watch
    rows = state.store.triggers.taken("events")
    assert sorted(n for n, _ in rows[table]) == [0, 1]
    # a run computed before the other's claim (1..1 and on) loses whole, writing nothing
    stale = VersionRun(table, (TableVersion(1, "1"), TableVersion(2, "2")))
    assert not state.store.triggers.claim("events", stale.key(), stale.taken(), "x")
    assert len(state.store.triggers.recent("events")) == 2


def test_a_reset_takes_the_versions_again_in_a_new_job(tmp_path: Path) -> None:
    state = site(tmp_path)
    append(state, range(0, 3))
    watcher(state).look(T0)
    state.store.triggers.reset("events", T0 - timedelta(days=3650), "test")
    watcher(state).look(T0 + timedelta(seconds=1))
    assert runs(state) == [[0, 0], [0, 0]]
    assert len({j.id for j in state.store.jobs(100)}) == 2


def test_a_table_trigger_refuses_file_fields_and_pinned_versions(tmp_path: Path) -> None:
    for field, value in (("marker", "_SUCCESS"), ("pattern", "*.parquet")):
        with pytest.raises(ValueError, match=f"{field}: a table trigger takes new versions"):
            TriggerSettings(watch="/t", table="delta", tenant="t", job={"model": "m"},
                            **{field: value})  # fmt: skip
    state = site(tmp_path)
    trigger = state.config.triggers["events"]
    pinned = {"model": "m", "source": {"options": {"versions": [0, 1]}}}
    config = state.config.model_copy(
        update={"triggers": {"events": trigger.model_copy(update={"job": pinned})}}
    )
    with pytest.raises(ConfigError, match=r"triggers\.events\.job\.source\.options\.versions"):
        check_triggers(config)
    assert check_triggers(state.config) == [
        f"triggers.events.watch: no delta table at {trigger.watch} yet"
    ]
    append(state, range(1))
    assert check_triggers(state.config) == []
