"""The CSV and JSONL readers alone: plan and read every shard of a 300,000-row file
through thresher's own source, best of 3, so a change to the readers' checks can be
weighed against the tree before it.

    PYTHONPATH=<tree>/src python benchmarks/read_text.py   # prints seconds per format

Compare two trees on one machine, alternating runs, and report the ratio of the best
times; the machine is shared and single figures are noisy.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from thresher.sources import open_source
from thresher.spec import SourceSection

ROWS = 300_000
FEATURES = [f"f{i}" for i in range(8)]


def write_inputs(root: Path) -> list[Path]:
    """A CSV and a JSONL file of the same rows: an id, 8 floats, a short text column."""
    csv, jsonl = root / "in.csv", root / "in.jsonl"
    if csv.exists() and jsonl.exists():
        return [csv, jsonl]
    x = np.random.default_rng(0).normal(size=(ROWS, len(FEATURES)))
    with csv.open("w") as f:
        f.write(",".join(["id", *FEATURES, "name"]) + "\n")
        for i in range(ROWS):
            f.write(f"{i}," + ",".join(f"{v:.6f}" for v in x[i]) + f",name-{i % 97}\n")
    with jsonl.open("w") as f:
        for i in range(ROWS):
            row = {"id": i, **dict(zip(FEATURES, map(float, x[i]), strict=True))}
            f.write(json.dumps({**row, "name": f"name-{i % 97}"}) + "\n")
    return [csv, jsonl]


def read_all(path: Path) -> float:
    """Seconds to plan and read the whole file (best of 3)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        source = open_source(SourceSection(uri=str(path), id_column="id"), ["name"])
        plan = source.plan()
        reader = source.reader(plan.schema, FEATURES)
        rows = sum(c.table.num_rows for s in plan.shards for c in reader.read(s, 65_536))
        best = min(best, time.perf_counter() - start)
        assert rows == ROWS, rows
    return best


def main() -> None:
    root = Path(tempfile.gettempdir()) / "thresher-read-text"
    root.mkdir(exist_ok=True)
    for path in write_inputs(root):
        print(f"{path.suffix[1:]} {read_all(path):.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
