"""A part of actuals read as a stream, within caps: past the rows or the decompressed
bytes allowed it stops with PartTooLarge naming the cap; a JSON line nested 20,000 deep
is a bad line naming its number, not a crashed process; the CLI, with no caps, still
reads everything, in blocks."""

from __future__ import annotations

import bz2
import gzip
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thresher.errors import MonitorError
from thresher.monitor.labels import read_file
from thresher.monitor.part_reader import PartLimits, PartTooLarge
from thresher.sources.lines import READ_BLOCK

CAPS = PartLimits(10_000, 1_000_000, "upload_max_rows", "upload_max_decompressed_bytes")
LINE = b'{"id": 1, "label": 0}\n'


def gzip_of(line: bytes, count: int) -> bytes:
    """`line` `count` times, gzipped a block at a time (never held whole)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block, left, out = line * 10_000, count, []
    while left > 0:
        take = min(left, 10_000)
        out.append(packer.compress(block if take == 10_000 else line * take))
        left -= take
    return b"".join([*out, packer.flush()])


def test_past_the_row_cap_a_compressed_part_stops_with_the_cap_named(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl.gz"
    path.write_bytes(gzip_of(LINE, 200_000))  # 4.4 MB of lines in a few KB
    assert path.stat().st_size < 50_000
    with pytest.raises(PartTooLarge) as caught:
        rows_only = PartLimits(10_000, None, "upload_max_rows")
        read_file(str(path), "id", "label", shown="many.jsonl.gz", limits=rows_only)
    assert "many.jsonl.gz: more than 10,000 rows" in str(caught.value)
    assert "(upload_max_rows)" in str(caught.value)


def test_past_the_byte_cap_a_part_stops_with_the_cap_named(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv.bz2"
    row = b"1," + b"x" * 5_000 + b"\n"
    path.write_bytes(bz2.compress(b"id,label\n" + row * 400))  # 2 MB, 400 rows
    with pytest.raises(PartTooLarge, match=r"more than 1,000,000 bytes once decompressed"):
        read_file(str(path), "id", "label", limits=CAPS)
    parquet = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"id": range(400), "label": ["x" * 5_000] * 400}), parquet)
    with pytest.raises(PartTooLarge, match=r"\(upload_max_decompressed_bytes\)"):
        read_file(str(parquet), "id", "label", limits=CAPS)


def test_a_parquet_part_over_the_row_cap_is_refused_by_its_metadata(tmp_path: Path) -> None:
    path = tmp_path / "long.parquet"
    pq.write_table(pa.table({"id": range(20_000), "label": [1] * 20_000}), path)
    with pytest.raises(PartTooLarge, match=r"long.parquet: more than 10,000 rows"):
        read_file(str(path), "id", "label", limits=CAPS)


def test_within_the_caps_and_without_any_every_row_is_read(tmp_path: Path) -> None:
    path = tmp_path / "fine.jsonl.gz"
    path.write_bytes(gzip_of(LINE, 10_000))
    assert len(read_file(str(path), "id", "label", limits=CAPS).ids) == 10_000
    big = tmp_path / "big.jsonl.gz"  # the CLI's: no caps, read in blocks of lines
    big.write_bytes(gzip_of(LINE, 300_000))
    assert len(read_file(str(big), "id", "label").labels) == 300_000


def test_blocks_that_disagree_on_a_type_are_joined_as_text(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    first_block = READ_BLOCK // len(LINE)  # lines of whole numbers, then a block of text
    path.write_bytes(LINE * first_block + b'{"id": "x7", "label": 1}\n' * 1_000)
    part = read_file(str(path), "id", "label")
    assert part.ids.type == pa.string()
    assert (part.ids[0].as_py(), part.ids[-1].as_py()) == ("1", "x7")


def test_a_bad_json_line_is_named_by_its_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(gzip.compress(LINE * 3 + b'{"id": 4, "label": \n' + LINE))
    with pytest.raises(MonitorError, match=r"bad.jsonl.gz line 4: cannot read it as jsonl"):
        read_file(str(path), "id", "label", limits=CAPS)
    missing = tmp_path / "m.jsonl"
    missing.write_bytes(b'{"key": 1, "label": 0}\n')
    with pytest.raises(MonitorError, match=r"m.jsonl: no id column 'id' \(it has key, label\)"):
        read_file(str(missing), "id", "label")


def test_a_line_nested_20000_deep_is_a_bad_line_not_a_crash(tmp_path: Path) -> None:
    """In a process of its own: before the nesting check it killed the process (SIGSEGV)."""
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b'{"id": 2, "label": ' + b"[" * 20_000 + b"]" * 20_000 + b"}\n" + LINE)
    script = (
        "import sys\n"
        "from thresher.errors import MonitorError\n"
        "from thresher.monitor.labels import read_file\n"
        "try:\n"
        "    read_file(sys.argv[1], 'id', 'label')\n"
        "except MonitorError as exc:\n"
        "    print(exc)\n"
    )
    command = [sys.executable, "-c", script, str(path)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the reader died: {done.returncode} {done.stderr[-2000:]}"
    assert "deep.jsonl line 1: cannot read it as jsonl: nested deeper than 100 levels" in (
        done.stdout
    )
