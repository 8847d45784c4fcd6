"""The store owns its schema: numbered migrations, run once when a store is opened."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from thresher.store import StoreError, open_store
from thresher.store import _schema as store_schema

# The tables as the release before migrations made them (store/jobs.py and
# store/retries.py at open, the service's modules when they first ran), with a job in it.
PREVIOUS_RELEASE = [
    """CREATE TABLE thresher_jobs (
        id TEXT PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL,
        spec TEXT NOT NULL, plan TEXT NOT NULL, shard_count INTEGER NOT NULL,
        created_at TEXT NOT NULL, finished_at TEXT, message TEXT,
        owner TEXT, heartbeat_at TEXT, manifest TEXT,
        tenant TEXT, priority INTEGER NOT NULL DEFAULT 0, idempotency_key TEXT,
        UNIQUE (tenant, idempotency_key))""",
    """CREATE TABLE thresher_shards (
        job_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0, rows_in BIGINT, rows_out BIGINT,
        rows_error BIGINT, seconds DOUBLE PRECISION, error TEXT,
        PRIMARY KEY (job_id, idx))""",
    """CREATE TABLE thresher_attempts (
        job_id TEXT NOT NULL, idx INTEGER NOT NULL, attempt TEXT NOT NULL,
        number INTEGER NOT NULL, started_at TEXT NOT NULL, finished_at TEXT,
        outcome TEXT, message TEXT, PRIMARY KEY (job_id, attempt))""",
    """CREATE TABLE thresher_tokens (
        token_sha256 TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_at TEXT NOT NULL)""",
    # The spec as the previous release wrote it (its model_dump, sections it left out
    # included at their defaults then; a section added since is defaulted on read).
    "INSERT INTO thresher_jobs (id, name, state, spec, plan, shard_count, created_at)"
    " VALUES ('20261130-020304-a1b2c3', 'nightly', 'succeeded',"
    """ '{"job": {"name": "nightly", "priority": 0},"""
    """ "source": {"uri": "/data/in.parquet", "id_column": "id"},"""
    """ "model": {"kind": "sklearn", "uri": "/models/m.skops", "trust": false},"""
    """ "sink": {"uri": "/data/out/", "format": "parquet", "mode": "overwrite"}}',"""
    " '{}', 0, '2026-11-30T02:03:04+00:00')",
]


def versions(path: Path) -> list[int]:
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute("SELECT version FROM thresher_schema ORDER BY 1")]


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_a_store_of_the_previous_release_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with sqlite3.connect(path) as db:
        for statement in PREVIOUS_RELEASE:
            db.execute(statement)
    store = open_store(f"sqlite:///{path}")
    assert store.job("20261130-020304-a1b2c3").name == "nightly"  # its data kept
    assert versions(path) == list(range(1, len(store_schema.MIGRATIONS) + 1))
    assert {"thresher_retries", "thresher_files", "thresher_requests"} <= tables(path)


def test_migrations_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store made by the current code stays at its version when opened again, and a new
    migration runs once on it, then never again."""
    path = tmp_path / "store.db"
    open_store(f"sqlite:///{path}").db.close()
    open_store(f"sqlite:///{path}").db.close()
    current = len(store_schema.MIGRATIONS)
    assert versions(path) == list(range(1, current + 1))

    added = [*store_schema.MIGRATIONS, ["ALTER TABLE thresher_jobs ADD COLUMN note TEXT"]]
    monkeypatch.setattr(store_schema, "MIGRATIONS", added)
    open_store(f"sqlite:///{path}").db.close()
    open_store(f"sqlite:///{path}").db.close()  # a second ADD COLUMN would fail
    assert versions(path) == list(range(1, current + 2))
    with sqlite3.connect(path) as db:
        assert "note" in [r[1] for r in db.execute("PRAGMA table_info(thresher_jobs)")]


def test_no_sql_against_thresher_tables_outside_the_store() -> None:
    """The store alone makes, changes, reads and writes thresher's own tables (the SQL
    sources and sinks keep theirs, for the user's database)."""
    src = Path(store_schema.__file__).parents[1]
    statement = re.compile(r"\b(FROM|INTO|UPDATE|JOIN|TABLE(?: IF NOT EXISTS)?)\s+thresher_\w+")
    offenders = [
        f"{p.relative_to(src)}: {m.group(0)}"
        for p in sorted(src.rglob("*.py"))
        if "store" not in p.relative_to(src).parts
        for m in statement.finditer(p.read_text())
    ]
    assert offenders == []


def test_a_store_a_newer_thresher_migrated_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    open_store(f"sqlite:///{path}")
    newer = len(store_schema.MIGRATIONS) + 1
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO thresher_schema (version) VALUES (?)", (newer,))
    before = path.read_bytes()
    with pytest.raises(StoreError, match=f"schema version {newer}, newer than this thresher"):
        open_store(f"sqlite:///{path}")
    assert path.read_bytes() == before
