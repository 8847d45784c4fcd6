"""Input a hostile or careless user gives the CSV and JSONL readers (issue 14).

Each case ends the same way as any bad record: the line lands in the error records with
its file and line number and a message naming what is wrong, and every other line is read
as usual. Nothing fails the whole input that one line could spoil, and nothing crashes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from test_sources import read_all, source, write_bytes

from thresher.sources.nesting import MAX_DEPTH

# --- nesting deep enough to overflow Arrow's recursion -------------------------------------

DEEP_SCRIPT = """
import json, sys
from thresher.sources import open_source
from thresher.spec import SourceSection

src = open_source(SourceSection(uri=sys.argv[1], id_column="id"), (), 1)
plan = src.plan()
reader = src.reader(plan.schema, plan.schema.names)
ids, bad = [], []
for shard in plan.shards:
    for chunk in reader.read(shard, 100):
        ids += chunk.table.column("id").to_pylist()
        bad += [(b.line, b.message) for b in chunk.bad]
print(json.dumps({"ids": ids, "bad": bad}))
"""


def deep_line(levels: int, row_id: int) -> bytes:
    return f'{{"id": {row_id}, "a": 1.0, "x": '.encode() + b"[" * levels + b"]" * levels + b"}"


def test_a_line_nested_20000_deep_is_one_bad_record_not_a_crash(tmp_path: Path) -> None:
    """In a subprocess: before the depth check, Arrow's schema inference died of SIGSEGV
    (-11) on this file, in the planner, taking the process with it."""
    good = [json.dumps({"id": i, "a": 0.5 * i}).encode() for i in range(6)]
    lines = [
        *good[:3],
        deep_line(20_000, 97),
        *good[3:],
        deep_line(MAX_DEPTH, 98),
        deep_line(50, 99),
    ]
    path = write_bytes(tmp_path / "deep.jsonl", b"\n".join(lines) + b"\n")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DEEP_SCRIPT), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-2000:]}"
    result = json.loads(done.stdout)
    assert result["ids"] == [0, 1, 2, 3, 4, 5, 99]  # 50 levels (+1 for the object) is fine
    message = f"nested deeper than {MAX_DEPTH} levels"
    assert result["bad"] == [[4, message], [8, message]]


def test_brackets_inside_strings_are_not_nesting(tmp_path: Path) -> None:
    lines = [json.dumps({"id": i, "a": 1.0, "t": "[{" * 300}).encode() for i in range(5)]
    result = read_all(source(write_bytes(tmp_path / "s.jsonl", b"\n".join(lines) + b"\n")))
    assert result.ids == list(range(5)) and result.bad == []
