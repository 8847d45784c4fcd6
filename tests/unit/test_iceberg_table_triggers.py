"""Iceberg table triggers: each new run of a table's snapshots is one set (one ledger row
a snapshot) and one job reading exactly what those snapshots appended; a snapshot is
taken once, by one of two watchers on one store. The catalog is the job's
`source.options.catalog`, a SQLite SQL catalog under allowed_roots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from iceberg_lake import lake
from thresher.service import submission
from thresher.service.background.watcher import Watcher
from thresher.service.config import ConfigError, ServerConfig, prepare
from thresher.service.state import ServiceState
from thresher.service.triggers import check_triggers
from thresher.spec import ModelSection
from thresher.store import open_store

MODEL = "class M:\n    def predict(self, batch):\n        return {'prediction': batch['x']}\n"
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def site(tmp_path: Path, catalog: Any = None) -> ServiceState:
    (tmp_path / "m.py").write_text(MODEL)
    shared = tmp_path / "shared"
    shared.mkdir()
    props, _ = lake(shared, "cat.db")
    job = {"model": "m", "id_column": "id",
           "source": {"options": {"catalog": props if catalog is None else catalog}}}  # fmt: skip
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            models={"m": ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")},
            allowed_roots=[str(shared)],
            triggers={"events": {"tenant": "acme", "job": job, "watch": "db.events",
                                 "table": "iceberg", "poll_seconds": 1}},
        )
    )  # fmt: skip
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    return ServiceState(store=store, config=config, data_dir=config.data_dir)


def append(state: ServiceState, ids: range) -> int:
    """Append `ids` to db.events (made the first time); the new snapshot's id."""
    props = state.config.triggers["events"].job["source"]["options"]["catalog"]
    catalog = load_catalog("default", **props)
    rows = pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array([float(i) for i in ids])})
    table = catalog.create_table_if_not_exists("db.events", schema=rows.schema)
    table.append(rows)
    return int(catalog.load_table("db.events").current_snapshot().snapshot_id)


def watcher(state: ServiceState) -> Watcher:
    return Watcher(state, lambda tenant, body, key: submission.submit_job(state, tenant, body, key))


def runs(state: ServiceState) -> list[list[int]]:
    found = [j.spec.source.options["snapshots"] for j in state.store.jobs(100)]
    return sorted(list(v) for v in found)


def test_each_run_of_new_snapshots_is_one_job(tmp_path: Path) -> None:
    state = site(tmp_path)
    w = watcher(state)
    w.look(T0)  # no table yet: nothing
    assert runs(state) == []
    a, b = append(state, range(0, 3)), append(state, range(3, 5))
    w.look(T0 + timedelta(seconds=1))
    c = append(state, range(5, 9))
    w.look(T0 + timedelta(seconds=2))
    w.look(T0 + timedelta(seconds=3))  # nothing new: no new job
    assert runs(state) == sorted([[a, b], [c, c]])
    (job, *_) = state.store.jobs(100)
    assert job.tenant == "acme" and job.name.startswith("events@")
    assert job.spec.source.format == "iceberg" and job.spec.source.uri == "db.events"
    assert state.store.triggers.files_seen() == {"events": 3}  # snapshots
    taken = state.store.triggers.taken("events")["db.events"]
    assert sorted(taken) == [(1, str(a)), (2, str(b)), (3, str(c))]


def test_two_watchers_on_one_store_take_each_snapshot_once(tmp_path: Path) -> None:
    state = site(tmp_path)
    other = ServiceState(
        store=open_store(state.store.url), config=state.config, data_dir=state.data_dir
    )
    a = append(state, range(0, 3))
    first, second = watcher(state), watcher(other)
    first.look(T0)
    second.look(T0)
    b = append(state, range(3, 5))
    second.look(T0 + timedelta(seconds=1))
    first.look(T0 + timedelta(seconds=1))
    assert runs(state) == sorted([[a, a], [b, b]])


def test_an_iceberg_trigger_is_checked_as_the_job_it_makes(tmp_path: Path) -> None:
    state = site(tmp_path)
    assert check_triggers(state.config) == [
        "triggers.events.watch: no iceberg table at db.events yet"
    ]
    append(state, range(1))
    assert check_triggers(state.config) == []
    trigger = state.config.triggers["events"]
    bad = {
        "watch": ("events", r"triggers\.events\.watch: an iceberg table is named namespace"),
        "job": ({**trigger.job, "source": {"options": {**trigger.job["source"]["options"],
                                                        "snapshots": [1, 2]}}},
                r"triggers\.events\.job\.source\.options\.snapshots"),
    }  # fmt: skip
    for field, (value, message) in bad.items():
        config = state.config.model_copy(
            update={"triggers": {"events": trigger.model_copy(update={field: value})}}
        )
        with pytest.raises(ConfigError, match=message):
            check_triggers(config)


def test_a_catalog_outside_allowed_roots_or_by_name_is_refused(tmp_path: Path) -> None:
    outside = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'other.db'}",
               "warehouse": str(tmp_path / "shared" / "lake")}  # fmt: skip
    for catalog, message in ((outside, r"catalog\.uri: .* is outside"), ("prod", "SQLite file")):
        where = tmp_path / str(len(str(catalog)))
        where.mkdir()
        state = site(where, catalog)
        with pytest.raises(ConfigError, match=message):
            check_triggers(state.config)
