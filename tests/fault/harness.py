"""A small real job for fault tests: input, model, spec, and helpers that run the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from deltalake import DeltaTable

THRESHER = str(Path(sys.executable).parent / "thresher")
FIGURES: list[str] = []  # one line per fault scenario, printed at the end of the run
ROWS = 24_000
FEATURES = [f"x{i}" for i in range(6)]


@dataclass
class FaultJob:
    """One job spec on disk, with its store, and ways to run, resume and check it."""

    root: Path
    spec: Path
    store: str
    sink: str  # "parquet", "sqlite", "duckdb", "delta" or "iceberg"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def database(self) -> Path:
        """A SQL sink's database file."""
        return self.root / ("out.duckdb" if self.sink == "duckdb" else "out.db")

    @property
    def side(self) -> Path:
        """Where the sink keeps `_SUCCESS` and `_errors/`: the output folder, or the one
        beside a SQL sink's database."""
        if self.sink == "delta":
            return self.out / "_thresher"
        if self.sink == "iceberg":  # in the table's location, which the catalog chose
            return self.root / "lake" / "db" / "scores" / "_thresher"
        return self.out if self.sink == "parquet" else Path(f"{self.database}.scores")

    def iceberg_table(self) -> Any:
        """The Iceberg sink's table, as pyiceberg reads it; None before its first publish."""
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog("default", **iceberg_catalog(self.root))
        return catalog.load_table("db.scores") if catalog.table_exists("db.scores") else None

    def table_rows(self, columns: str) -> list[tuple[object, ...]]:
        """A table sink's `SELECT <columns> FROM scores`, read by the table's own library."""
        if self.sink in ("delta", "iceberg"):
            if self.sink == "iceberg":
                iceberg = self.iceberg_table()
                if iceberg is None:
                    return []
                table = iceberg.scan().to_arrow()
            elif not DeltaTable.is_deltatable(str(self.out)):
                return []
            else:
                table = DeltaTable(self.out).to_pyarrow_table()
            names = table.column_names if columns == "*" else columns.split(", ")
            return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))
        if self.sink == "duckdb":
            with closing(duckdb.connect(str(self.database), read_only=True)) as conn:
                return conn.execute(f"SELECT {columns} FROM scores").fetchall()
        with closing(sqlite3.connect(self.database)) as db:
            return db.execute(f"SELECT {columns} FROM scores").fetchall()

    def env(self, fault: str | None = None) -> dict[str, str]:
        env = {**os.environ, "THRESHER_STORE": self.store, "PYTHONWARNINGS": "ignore"}
        env.pop("THRESHER_FAULT", None)
        if fault:
            env["THRESHER_FAULT"] = fault
        return env

    def cli(self) -> list[str]:
        return [THRESHER]

    def start(self, fault: str | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [THRESHER, "run", str(self.spec)],
            env=self.env(fault),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [THRESHER, "run", str(self.spec)]
        return subprocess.run(
            cmd, env=self.env(fault), capture_output=True, text=True, check=False, timeout=180
        )

    def latest_job(self) -> str:
        job_id = self.recorded_job()
        assert job_id, "the job was never recorded"
        return job_id

    def recorded_job(self) -> str | None:
        """The job last recorded in the store; None when the coordinator was killed before
        it recorded any (still importing, or creating the store's tables)."""
        with sqlite3.connect(self.store.removeprefix("sqlite:///")) as db:
            try:
                row = db.execute(
                    "SELECT id FROM thresher_jobs ORDER BY created_at DESC LIMIT 1"
                ).fetchone()
            except sqlite3.OperationalError:  # no thresher_jobs table yet
                return None
        return str(row[0]) if row else None

    def resume(self, job_id: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [THRESHER, "resume", job_id]
        return subprocess.run(
            cmd, env=self.env(fault), capture_output=True, text=True, check=False, timeout=180
        )

    def ids(self, pending: str | None = None) -> Counter[int]:
        """The multiset of ids in the output (and, separately, nothing else); with
        `pending`, in that job's committed but unpublished parts instead."""
        if self.sink != "parquet":
            return Counter(r[0] for r in self.table_rows("id"))
        folder = self.out / "_pending" / pending if pending else self.out
        parts = sorted(folder.glob("part-*.parquet"))
        return Counter(pq.read_table(parts).column("id").to_pylist()) if parts else Counter()

    def error_ids(self) -> Counter[int]:
        folder = self.side / "_errors"
        ids: Counter[int] = Counter()
        for part in sorted(folder.glob("*.jsonl")) if folder.exists() else []:
            ids.update(json.loads(line)["id"] for line in part.read_text().splitlines())
        return ids

    def stray_files(self, pending: str | None = None) -> list[str]:
        """Anything in the output that is neither a committed part nor thresher's own;
        with `pending`, that job's committed, unpublished parts are its own too."""
        folder = self.side
        allowed = {"_SUCCESS", "_thresher.json", "JOB_FAILED"}
        waiting = f"_pending/{pending}/" if pending else None
        strays = []
        for path in folder.rglob("*"):
            rel = path.relative_to(folder).as_posix()
            if waiting and path.is_dir() and waiting.startswith(rel + "/"):
                continue  # `_pending/` and `_pending/<job>/`
            if waiting and rel.startswith(waiting):
                rel = rel.removeprefix(waiting)
            if path.is_dir() and rel == "_errors":
                continue
            ok = rel in allowed or (rel.startswith("part-") and "/" not in rel)
            ok = ok or (rel.startswith("_errors/part-") and rel.endswith(".jsonl"))
            if not ok:
                strays.append(rel)
        return strays

    def has_success(self) -> bool:
        return (self.side / "_SUCCESS").exists()


def make_job(root: Path, sink: str, source: str = "parquet", pace: float = 0.0) -> FaultJob:
    """24k rows in ~12 shards; the model raises on a few rows so errors take part too.

    `pace`: seconds each call of the model sleeps, for the tests that stop a job at a
    moment in time (a kill after a delay, a cancel) and need it still running then: 0.02
    makes a run about 4 s (the search for the bad rows calls the model often) where one
    at full speed takes about 1. A crash point needs no pace: it is reached whatever
    the speed."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    data = {"id": np.arange(ROWS, dtype=np.int64)}
    data |= {f: rng.standard_normal(ROWS) for f in FEATURES}
    table = pa.table(data)
    if source == "parquet":
        pq.write_table(table, root / "input.parquet", row_group_size=2_000)
        source_toml = 'uri = "input.parquet"\nshard_bytes = 1024'
    elif source == "csv":
        pacsv.write_csv(table, root / "input.csv")
        source_toml = 'uri = "input.csv"\nshard_bytes = 200000'
    else:
        source_toml = table_input(root, source, table)
    (root / "model.py").write_text(MODEL.replace("PACE", repr(pace)))
    sink_uri = {
        "parquet": 'uri = "out/"',
        "sqlite": 'uri = "sqlite:///out.db?table=scores"',
        "duckdb": 'uri = "duckdb:///out.duckdb?table=scores"',
        "delta": 'uri = "out"\nformat = "delta"',
        "iceberg": 'uri = "db.scores"\nformat = "iceberg"\noptions.catalog = '
        '{ type = "sql", uri = "sqlite:///catalog.db", warehouse = "lake" }',
    }[sink]
    if sink == "iceberg":
        from pyiceberg.catalog import load_catalog

        load_catalog("default", **iceberg_catalog(root)).create_namespace_if_not_exists("db")
    spec = root / "job.toml"
    spec.write_text(
        f'[source]\n{source_toml}\nid_column = "id"\n'
        '[model]\nkind = "python"\nuri = "model.py:Scorer"\nbatch_format = "numpy"\n'
        "[batch]\nsize = 500\n[run]\nworkers = 2\nshard_timeout = 60\n"
        f"[sink]\n{sink_uri}\n"
    )
    return FaultJob(root, spec, f"sqlite:///{root / 'store.db'}", sink)


def table_input(root: Path, source: str, table: pa.Table) -> str:
    """The input as a table of `source`'s kind, in about twelve shards; its `[source]`
    lines. Delta and Iceberg: twelve commits of 2,000 rows, a file (and a shard) each (the
    plan freezes the version); SQLite and DuckDB: a query in key ranges of 2,000 ids."""
    twelfths = [table.slice(n * 2_000, 2_000) for n in range(12)]
    if source == "features":  # the ids as entities, their x's joined from a feature table
        return feature_input(root, table)
    if source == "delta":
        from deltalake import write_deltalake

        for rows in twelfths:
            write_deltalake(root / "input", rows, mode="append")
        return 'uri = "input"\nformat = "delta"\nshard_bytes = 1024'
    if source == "iceberg":
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog("default", **iceberg_catalog(root))
        catalog.create_namespace_if_not_exists("db")
        made = catalog.create_table("db.input", schema=table.schema)
        for rows in twelfths:
            made.append(rows)
        return (
            'uri = "db.input"\nformat = "iceberg"\noptions.catalog = '
            '{ type = "sql", uri = "sqlite:///catalog.db", warehouse = "lake" }'
        )
    database = root / f"input.{source}"
    if source == "duckdb":
        with closing(duckdb.connect(str(database))) as conn:
            conn.register("rows", table)
            conn.execute("CREATE TABLE input AS SELECT * FROM rows")
    else:
        with closing(sqlite3.connect(database)) as db:
            columns = ", ".join(f"{name} REAL" for name in FEATURES)
            db.execute(f"CREATE TABLE input (id INTEGER, {columns})")
            marks = ", ".join("?" for _ in table.column_names)
            values = [tuple(row.values()) for row in table.to_pylist()]
            db.executemany(f"INSERT INTO input VALUES ({marks})", values)
            db.commit()
    return (
        f'uri = "{source}:///{database.name}"\nquery = "SELECT * FROM input"\n'
        'key_column = "id"\nshard_rows = 2000'
    )


def feature_input(root: Path, table: pa.Table) -> str:
    """Entities (the ids, as of a day) and a feature table holding each id's x's as of
    that day, beside an older row and a later one of other values that a right join never
    picks; its `[source]` lines."""
    day = 1_704_067_200_000_000  # 2024-01-01, in µs
    second = 1_000_000

    def at(micros: int) -> pa.Array:
        return pa.array([micros] * table.num_rows, pa.timestamp("us"))

    entities = pa.table({"id": table["id"], "as_of": at(day)})
    pq.write_table(entities, root / "entities.parquet", row_group_size=2_000)
    rows = [table.append_column("event_time", at(day))]
    for shift, offset in ((-second, 100.0), (second, -100.0)):  # older, and later than as_of
        moved = table.append_column("event_time", at(day + shift))
        for name in FEATURES:
            moved = moved.set_column(
                moved.schema.get_field_index(name), name, pc.add(moved[name], offset)
            )
        rows.append(moved)
    pq.write_table(pa.concat_tables(rows), root / "features.parquet", row_group_size=8_000)
    return (
        'uri = "entities.parquet"\nformat = "features"\nshard_bytes = 1024\n'
        'options = { timestamp = "as_of", tables = [{ uri = "features.parquet",'
        ' key = "id", timestamp = "event_time" }] }'
    )


def iceberg_catalog(root: Path) -> dict[str, str]:
    """The Iceberg sink's SQLite catalog, as the spec names it relative to its folder."""
    return {
        "type": "sql",
        "uri": f"sqlite:///{root / 'catalog.db'}",
        "warehouse": str(root / "lake"),
    }


# A deterministic model that is slow enough (20 ms a batch) for kills to land mid-shard,
# and that rejects the few rows with x0 > 3.2, so the error path is exercised as well.
MODEL = """
import time

class Scorer:
    def predict(self, batch):
        time.sleep(PACE)
        if (batch["x0"] > 3.2).any():
            raise ValueError("x0 out of range")
        return {"score": batch["x0"] * 2.0 + batch["x1"]}
"""


def wait_for_children(pid: int, timeout: float = 20.0) -> list[int]:
    """A coordinator's child processes, once it has some (empty if it finished first):
    its zygote, from which CPU workers are forked."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = children(pid)
        if kids:
            return kids
        time.sleep(0.05)
    return []


def wait_for_workers(pid: int, timeout: float = 20.0) -> list[int]:
    """A coordinator's worker pids, forked by its zygote, once it has some (empty if it
    finished first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = [worker for kid in children(pid) for worker in children(kid)]
        if workers:
            return workers
        time.sleep(0.05)
    return []


def children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry))
    return kids
