#!/usr/bin/env python3
"""Coverage-guided fuzzing of the CSV and JSONL readers with atheris: on demand, not in CI.

    pip install atheris            # a binary wheel for CPython 3.11 on Linux x86-64
    python scripts/fuzz_readers.py -atheris_runs=200000 corpus/

An empty corpus folder is seeded with a few good files first (fuzzing from nothing spends
its time on inputs that hold no record at all).

Each fuzz input is one file: its first byte picks the format (even: CSV under the header
`id,a,t`; odd: JSONL), its second the shard size in bytes, the rest is the file's body.
The file is planned and read through the csv / jsonl plug-in's own source, with read
blocks of 64 bytes and a record limit of 512, so lines straddle blocks and shards and
long lines are cheap. Anything but this is a finding, and libFuzzer saves the input:

- planning refuses the whole input only with a SourceError (no record to infer from);
- every non-blank line is in exactly one place, an output row or an error record, at its
  own 1-based line number; blank lines and numbers past the file's end are in neither;
- no other exception, and no crash (a segfault in Arrow shows as libFuzzer's deadly
  signal).

tests/unit/test_reader_fuzz.py is the Hypothesis fuzzer CI runs; this one explores further.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from thresher.errors import SourceError
    from thresher.sources import lines, open_source
    from thresher.spec import SourceSection

FOLDER = Path(tempfile.mkdtemp(prefix="thresher-fuzz-"))


def test_one_input(data: bytes) -> None:
    fmt = "csv" if data[:1] and data[0] % 2 == 0 else "jsonl"
    shard_bytes = 1 + (data[1] if len(data) > 1 else 0)
    header = b"id,a,t\n" if fmt == "csv" else b""
    content = header + data[2:]
    path = FOLDER / f"input.{fmt}"
    path.write_bytes(content)
    section = SourceSection(uri=str(path), format=fmt, id_column="id")
    source = replace(open_source(section, ["t"], 1), shard_bytes=shard_bytes)
    try:
        plan = source.plan()
    except SourceError:
        return
    reader = source.reader(plan.schema, plan.schema.names)
    placed: Counter[int] = Counter()
    for shard in plan.shards:
        for chunk in reader.read(shard, 7):
            placed.update(reader.locate(shard, int(p))[1] for p in chunk.positions)
            placed.update(b.line for b in chunk.bad if b.line is not None)
    check(content, placed, first=2 if header else 1)


def check(content: bytes, placed: Counter[int], first: int) -> None:
    held = content.split(b"\n")
    if held[-1] == b"":
        held.pop()  # the file ends with a newline: no line after it
    records = {n for n in range(first, len(held) + 1) if held[n - 1].strip()}
    twice = sorted(n for n, count in placed.items() if count > 1)
    lost = sorted(records - placed.keys())
    strays = sorted(placed.keys() - records)
    if twice or lost or strays:
        raise AssertionError(f"lines twice {twice}, lost {lost}, not records {strays}")


SEEDS = {
    "csv": b"\x00\x40" + b'1,0.5,x\n2,1.5,"y, z"\r\n\n3,-2e3,"q ""r"""\n',
    "jsonl": b"\x01\x40" + b'{"id": 1, "a": 0.5, "t": "x"}\n\n{"id": 2, "a": 1e3, "t": "[{"}\r\n',
    "nested": b"\x01\x10" + b'{"id": 1, "a": [[[1]]], "t": {"u": [null, true]}}\n',
}


def seed(folders: list[str]) -> None:
    for folder in folders:
        path = Path(folder)
        if path.is_dir() and not any(path.iterdir()):
            for name, data in SEEDS.items():
                (path / name).write_bytes(data)


def main() -> None:
    seed([arg for arg in sys.argv[1:] if not arg.startswith("-")])
    lines.READ_BLOCK = 64
    lines.MAX_RECORD_BYTES = 512
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
