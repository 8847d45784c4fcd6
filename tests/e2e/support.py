"""End-to-end helpers: real input files, real models, the real `thresher` CLI, real outputs.

A `Workspace` (a fresh folder per test, from the `workspace` fixture) writes inputs, trains
and saves models, writes TOML specs, runs the console script in a subprocess (so worker
processes are real) and reads back what the sink wrote.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

THRESHER = Path(sys.executable).parent / "thresher"
FEATURES = [f"f{i}" for i in range(6)]
ID = "customer_id"
KEEP = "segment"
SEGMENTS = np.array(["retail", "premium", "small-business"])
# True weights of the synthetic task; the models below learn something close to them.
WEIGHTS = np.array([1.5, -2.0, 0.8, 0.0, 1.1, -0.6])
# Small runs: two workers and shards of a few KiB, so every run has several shards.
FAST = ("--set", "run.workers=2")


def make_table(rows: int = 2000, seed: int = 0) -> pa.Table:
    """Customers: a shuffled int id (so input order is not id order), six float features
    and a string keep column."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, len(FEATURES)))
    data: dict[str, Any] = {ID: rng.permutation(rows).astype(np.int64) + 10_000}
    data |= {name: x[:, i] for i, name in enumerate(FEATURES)}
    data[KEEP] = SEGMENTS[rng.integers(0, len(SEGMENTS), rows)]
    return pa.table(data)


def features(table: pa.Table) -> np.ndarray:
    """The feature matrix, float64, in FEATURES order."""
    return np.column_stack([table.column(f).to_numpy() for f in FEATURES])


def labels(table: pa.Table, seed: int = 1) -> np.ndarray:
    """A binary target that depends on the features, with some noise (learnable, not exact)."""
    noise = np.random.default_rng(seed).normal(scale=0.5, size=table.num_rows)
    return (features(table) @ WEIGHTS + noise > 0).astype(np.int64)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def to_toml(spec: Mapping[str, Mapping[str, Any]]) -> str:
    lines: list[str] = []
    for section, values in spec.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Trained:
    """A saved model: the `[model]` section that loads it, the file whose sha256 the
    manifest must carry, and the direct call whose outputs thresher's must equal."""

    section: dict[str, Any]
    file: Path
    expect: Callable[[pa.Table], dict[str, np.ndarray]]


@dataclass
class Output:
    """What a run wrote: the rows (in part-name order, or by id for SQL), its manifest and
    its error records."""

    table: pa.Table
    manifest: dict[str, Any] | None
    errors: list[dict[str, Any]] = field(default_factory=list)


class Workspace:
    """A fresh folder and the steps of an end-to-end run, each as one method."""

    def __init__(self, root: Path) -> None:
        self.root = root

    # Inputs.

    def write_input(self, table: pa.Table, fmt: str, name: str = "customers") -> Path:
        path = self.root / f"{name}.{fmt}"
        if fmt == "parquet":
            pq.write_table(table, path, row_group_size=400)
        elif fmt == "csv":
            path.write_bytes(csv_bytes(table))
        elif fmt == "jsonl":
            lines = (json.dumps(row) for row in table.to_pylist())
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        else:
            raise ValueError(fmt)
        return path

    # Models.

    def sklearn_skops(self, table: pa.Table) -> Trained:
        import skops.io
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(max_iter=1000).fit(features(table), labels(table))
        path = self.root / "model.skops"
        skops.io.dump(model, path)

        def expect(rows: pa.Table) -> dict[str, np.ndarray]:
            proba = model.predict_proba(features(rows))
            return {
                "prediction": model.predict(features(rows)),
                "proba_0": proba[:, 0],
                "proba_1": proba[:, 1],
            }

        section = {"kind": "sklearn", "uri": path.name, "outputs": ["prediction", "proba"]}
        return Trained(section, path, expect)

    def sklearn_joblib(self, table: pa.Table) -> Trained:
        import joblib
        import pandas as pd
        from sklearn.ensemble import HistGradientBoostingClassifier

        frame = pd.DataFrame(features(table), columns=FEATURES)  # fitted on named columns
        model = HistGradientBoostingClassifier(max_iter=20, random_state=0)
        model.fit(frame, labels(table))
        path = self.root / "model.joblib"
        joblib.dump(model, path)

        def expect(rows: pa.Table) -> dict[str, np.ndarray]:
            proba = model.predict_proba(pd.DataFrame(features(rows), columns=FEATURES))
            return {
                "prediction": model.predict(pd.DataFrame(features(rows), columns=FEATURES)),
                "proba_0": proba[:, 0],
                "proba_1": proba[:, 1],
            }

        section = {
            "kind": "sklearn",
            "uri": path.name,
            "trust": True,
            "outputs": ["prediction", "proba"],
        }
        return Trained(section, path, expect)

    def onnx(self, table: pa.Table) -> Trained:
        import onnxruntime as ort
        from skl2onnx import to_onnx
        from sklearn.linear_model import LogisticRegression

        x32 = features(table).astype(np.float32)
        model = LogisticRegression(max_iter=1000).fit(x32, labels(table))
        path = self.root / "model.onnx"
        path.write_bytes(to_onnx(model, x32[:1], options={"zipmap": False}).SerializeToString())
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

        def expect(rows: pa.Table) -> dict[str, np.ndarray]:
            label, proba = session.run(None, {"X": features(rows).astype(np.float32)})
            return {"prediction": label, "proba_0": proba[:, 0], "proba_1": proba[:, 1]}

        section = {"kind": "onnx", "uri": path.name, "outputs": ["prediction", "proba"]}
        return Trained(section, path, expect)

    def python(self, code: str, cls: str, **section: Any) -> Trained:
        """A `file.py:Class` model; its expected outputs come from the same class, called
        here directly with a pandas batch (the default batch_format)."""
        path = self.root / "user_model.py"
        path.write_text(code, encoding="utf-8")
        options = section.get("options", {})

        def expect(rows: pa.Table) -> dict[str, np.ndarray]:
            module_spec = importlib.util.spec_from_file_location("e2e_user_model", path)
            assert module_spec is not None and module_spec.loader is not None
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            instance = getattr(module, cls)(**options)
            instance.setup()
            out = instance.predict(rows.select(FEATURES).to_pandas())
            return {name: np.asarray(values) for name, values in out.items()}

        return Trained({"kind": "python", "uri": f"{path.name}:{cls}", **section}, path, expect)

    # Specs and runs.

    def spec(self, spec: Mapping[str, Mapping[str, Any]], name: str = "job.toml") -> Path:
        path = self.root / name
        path.write_text(to_toml(spec), encoding="utf-8")
        return path

    def run(self, *args: str | Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """The real console script, stdout and stderr captured (so neither is a terminal)."""
        return subprocess.run(
            [str(THRESHER), *map(str, args)],
            cwd=self.root,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="backslashreplace",
            timeout=timeout,
            check=False,
        )

    # Outputs.

    def read_dir(self, directory: Path, fmt: str) -> Output:
        """Parts in name order (which is input order), the manifest if any, the errors."""
        parts = sorted(directory.glob(f"part-*.{fmt}"))
        tables = [read_part(p, fmt) for p in parts]
        table = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
        return Output(table, read_json(directory / "_SUCCESS"), read_errors(directory / "_errors"))

    def read_sqlite(self, db: Path, table: str) -> Output:
        """Every column of the table, its rows ordered by id."""
        with closing(sqlite3.connect(db)) as conn:
            cursor = conn.execute(f'SELECT * FROM "{table}" ORDER BY "{ID}"')
            columns = [d[0] for d in cursor.description]
            rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        side = Path(f"{db}.{table}")
        return Output(
            pa.Table.from_pylist(rows), read_json(side / "_SUCCESS"), read_errors(side / "_errors")
        )


def csv_bytes(table: pa.Table) -> bytes:
    """A CSV with floats written by repr, so they read back bit for bit."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.column_names)
    writer.writerows(
        [repr(v) if isinstance(v, float) else v for v in row.values()] for row in table.to_pylist()
    )
    return out.getvalue().encode("utf-8")


def read_part(path: Path, fmt: str) -> pa.Table:
    if fmt == "parquet":
        return pq.read_table(path)
    if fmt == "csv":
        return pacsv.read_csv(path)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return pa.Table.from_pylist(rows)


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def read_errors(directory: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            records.append(json.loads(line))
    return records


# A bare `thresher run` in a folder of its own, for tests that watch the process itself.


def store_env(root: Path, fault: str | None = None) -> dict[str, str]:
    """The environment of a CLI run in `root`: its own SQLite store, and the crash point
    `fault` (THRESHER_FAULT) if one is named, none otherwise."""
    variables = {**os.environ, "THRESHER_STORE": f"sqlite:///{root / 'store.db'}"}
    variables.pop("THRESHER_FAULT", None)
    if fault:
        variables["THRESHER_FAULT"] = fault
    return variables


def start_run(root: Path, spec: Path, fault: str | None = None) -> subprocess.Popen[str]:
    """`thresher run SPEC` started in `root`, what it says on stdout and stderr together."""
    return subprocess.Popen(
        [str(THRESHER), "run", str(spec)],
        cwd=root,
        env=store_env(root, fault),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run_manifest(root: Path) -> dict[str, Any]:
    """The `_SUCCESS` manifest of a run whose spec writes to `root / "out"`."""
    return dict(json.loads((root / "out" / "_SUCCESS").read_text()))


def latest_job(root: Path) -> str | None:
    """The newest job in `root`'s store, None before one is recorded (or before the
    store has its tables: the CLI creates the file first)."""
    if not (root / "store.db").exists():
        return None
    with closing(sqlite3.connect(root / "store.db")) as db:
        try:
            row = db.execute("SELECT id FROM thresher_jobs ORDER BY created_at DESC").fetchone()
        except sqlite3.OperationalError:  # the file is there, its tables not yet
            return None
    return None if row is None else str(row[0])
