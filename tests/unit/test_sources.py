"""Sources: planning into shards, and reading every record exactly once, in order.

Each format is checked the same way: find the files, plan, pickle the shards and the
reader as a worker would receive them, read every shard, and compare the ids that come
back with the ids written.
"""

from __future__ import annotations

import gzip
import json
import pickle
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thresher.errors import SourceError
from thresher.records import RAW_LIMIT, BadRecord
from thresher.sources import Source, lines, open_source, text
from thresher.sources.base import Chunk, Plan, Shard, ShardReader
from thresher.sources.csv import CsvFormat
from thresher.sources.jsonl import JsonlFormat
from thresher.sources.parquet import ParquetReader, ParquetSource
from thresher.sources.text import SAMPLE_BYTES, TextSource
from thresher.spec import SourceSection

FORMATS = ("parquet", "csv", "jsonl")


# --- writing inputs ------------------------------------------------------------------------


def records(ids: Sequence[int]) -> list[dict[str, Any]]:
    return [{"id": i, "a": i * 0.5, "b": i % 7} for i in ids]


def write_rows(path: Path, ids: Sequence[int], row_group_size: int = 64) -> Path:
    """`ids` as rows (id, a, b) in the format the suffix names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = records(ids)
    if path.name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    elif ".csv" in path.name:
        text = "id,a,b\n" + "".join(f"{r['id']},{r['a']},{r['b']}\n" for r in rows)
        write_bytes(path, text.encode())
    else:
        write_bytes(path, "".join(json.dumps(r) + "\n" for r in rows).encode())
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def source(uri: Path | str, fmt: str | None = None, **section: Any) -> Source:
    keep, min_shards = section.pop("keep", ()), section.pop("min_shards", 1)
    spec = SourceSection(uri=str(uri), format=fmt, id_column="id", **section)  # type: ignore[arg-type]
    return open_source(spec, keep, min_shards)


# --- reading everything the way a worker does ----------------------------------------------


@dataclass
class ReadResult:
    plan: Plan
    reader: ShardReader
    chunks: list[tuple[Shard, Chunk]]

    @property
    def ids(self) -> list[int]:
        return [i for _, c in self.chunks for i in c.table.column("id").to_pylist()]

    @property
    def bad(self) -> list[BadRecord]:
        return [b for _, c in self.chunks for b in c.bad]


def read_all(src: Source, rows_per_chunk: int = 1000) -> ReadResult:
    """Plan, ship shards and reader through pickle, read each shard in index order."""
    plan = src.plan()
    assert [s.index for s in plan.shards] == list(range(len(plan.shards)))
    reader = pickle.loads(pickle.dumps(src.reader(plan.schema, plan.schema.names)))
    chunks = []
    for shard in plan.shards:
        shipped = pickle.loads(pickle.dumps(shard))
        assert shipped == shard
        for chunk in reader.read(shipped, rows_per_chunk):
            assert chunk.table.num_rows <= rows_per_chunk
            assert len(chunk.positions) == chunk.table.num_rows
            assert chunk.table.schema.names == plan.schema.names
            chunks.append((shipped, chunk))
    return ReadResult(plan, reader, chunks)


# --- one file, a directory, a glob ---------------------------------------------------------


def one_file(root: Path, ext: str) -> tuple[Path, list[int]]:
    return write_rows(root / f"data.{ext}", range(500)), list(range(500))


def directory(root: Path, ext: str) -> tuple[Path, list[int]]:
    data = root / "in"
    write_rows(data / f"part-1.{ext}", range(300, 450))
    write_rows(data / f"part-0.{ext}", range(300))
    write_rows(data / "year=2024" / f"part-2.{ext}", range(450, 520))
    # none of these is input: markers, hidden and underscore files, hidden folders, others
    (data / "_SUCCESS").write_text("{}")
    write_rows(data / f"_temporary.{ext}", range(9000, 9010))
    write_rows(data / f".part-0.{ext}", range(9010, 9020))
    write_rows(data / ".staging" / f"part-9.{ext}", range(9020, 9030))
    write_rows(data / "_tmp" / f"part-9.{ext}", range(9030, 9040))
    (data / "notes.txt").write_text("not data\n")
    return data, list(range(520))


def glob(root: Path, ext: str) -> tuple[str, list[int]]:
    data = root / "in"
    write_rows(data / f"day-2.{ext}", range(100, 250))
    write_rows(data / f"day-1.{ext}", range(100))
    write_rows(data / f"other-1.{ext}", range(9000, 9010))
    return f"{data}/day-*.{ext}", list(range(250))


@pytest.mark.parametrize("layout", [one_file, directory, glob])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_record_once_in_order(
    tmp_path: Path, fmt: str, layout: Callable[[Path, str], tuple[Any, list[int]]]
) -> None:
    uri, expected = layout(tmp_path, fmt)
    result = read_all(source(uri, fmt, shard_bytes=1024), rows_per_chunk=37)
    assert result.ids == expected
    assert result.bad == []
    assert len(result.plan.shards) > len({s.path for s in result.plan.shards})  # really split


@pytest.mark.parametrize("fmt", FORMATS)
def test_directory_whose_own_name_is_hidden_style(tmp_path: Path, fmt: str) -> None:
    """Only names below the directory given decide what is skipped."""
    write_rows(tmp_path / "_input" / f"part-0.{fmt}", range(10))
    write_rows(tmp_path / "_input" / "_tmp" / f"part-1.{fmt}", range(10, 20))
    assert read_all(source(tmp_path / "_input", fmt)).ids == list(range(10))


@pytest.mark.parametrize("fmt", FORMATS)
def test_directory_with_trailing_slash(tmp_path: Path, fmt: str) -> None:
    write_rows(tmp_path / "in" / f"part-0.{fmt}", range(10))
    assert read_all(source(f"{tmp_path}/in/", fmt)).ids == list(range(10))


@pytest.mark.parametrize("fmt", FORMATS)
def test_planning_is_deterministic(tmp_path: Path, fmt: str) -> None:
    uri, _ = directory(tmp_path, fmt)
    first = source(uri, fmt, shard_bytes=1024).plan()
    again = source(uri, fmt, shard_bytes=1024).plan()
    assert first.shards == again.shards
    assert first.schema == again.schema
    assert pickle.loads(pickle.dumps(first)) == first


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("uri", ["missing.{fmt}", "empty/", "empty/*.{fmt}", "nothing-*.{fmt}"])
def test_no_input_files_names_source_uri(tmp_path: Path, fmt: str, uri: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_text("{}")
    full = f"{tmp_path}/{uri.format(fmt=fmt)}"
    with pytest.raises(SourceError, match=r"^source\.uri: no input files at ") as info:
        source(full, fmt).plan()
    assert full in str(info.value)


# --- Parquet planning ----------------------------------------------------------------------


def test_parquet_shards_are_runs_of_row_groups(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "data.parquet", range(1000), row_group_size=50)
    meta = pq.ParquetFile(path).metadata
    sizes = [meta.row_group(g).total_byte_size for g in range(meta.num_row_groups)]
    assert len(sizes) == 20
    shard_bytes = int(sizes[0] * 2.5)
    plan = ParquetSource(uri=str(path), shard_bytes=shard_bytes).plan()

    assert plan.shards[0].start == 0
    assert plan.shards[-1].stop == 20
    for before, after in pairwise(plan.shards):
        assert before.stop == after.start
        assert after.first_row == before.first_row + before.rows  # type: ignore[operator]
    for shard in plan.shards:
        held = sum(sizes[shard.start : shard.stop])
        if shard is not plan.shards[-1]:
            # grouped until the shard holds shard_bytes, and not one group longer
            assert held >= shard_bytes > held - sizes[shard.stop - 1]
        assert shard.rows == 50 * (shard.stop - shard.start)
        assert shard.first_row == 50 * shard.start
    assert 5 <= len(plan.shards) <= 10


def test_parquet_chunks_span_row_groups_and_keep_their_positions(tmp_path: Path) -> None:
    """Row groups of 7 rows read in chunks of 16: every chunk is full but the last, rows
    come out once each, in order, with their positions in the file."""
    path = write_rows(tmp_path / "data.parquet", range(70), row_group_size=7)
    source = ParquetSource(uri=str(path), shard_bytes=1 << 40)
    (shard,) = source.plan().shards
    chunks = list(source.reader(source.plan().schema, ["id"]).read(shard, 16))
    assert [c.table.num_rows for c in chunks] == [16, 16, 16, 16, 6]
    assert np.concatenate([c.positions for c in chunks]).tolist() == list(range(70))
    values = [v for c in chunks for v in c.table.column("id").to_pylist()]
    assert values == list(range(70))


def test_parquet_shard_closes_when_it_reaches_shard_bytes(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "data.parquet", range(100), row_group_size=10)
    meta = pq.ParquetFile(path).metadata
    exact = meta.row_group(0).total_byte_size + meta.row_group(1).total_byte_size
    plan = ParquetSource(uri=str(path), shard_bytes=exact).plan()
    assert (plan.shards[0].start, plan.shards[0].stop, plan.shards[0].rows) == (0, 2, 20)


def test_parquet_shard_bytes_extremes(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "data.parquet", range(200), row_group_size=20)
    tiny = ParquetSource(uri=str(path), shard_bytes=1).plan()
    assert [(s.start, s.stop) for s in tiny.shards] == [(g, g + 1) for g in range(10)]
    huge = ParquetSource(uri=str(path), shard_bytes=1 << 40).plan()
    assert [(s.start, s.stop, s.first_row, s.rows) for s in huge.shards] == [(0, 10, 0, 200)]


def test_parquet_shards_never_span_files(tmp_path: Path) -> None:
    write_rows(tmp_path / "in" / "a.parquet", range(30), row_group_size=10)
    write_rows(tmp_path / "in" / "b.parquet", range(30, 50), row_group_size=10)
    plan = ParquetSource(uri=str(tmp_path / "in"), shard_bytes=1 << 40).plan()
    assert [(Path(s.path).name, s.start, s.stop, s.first_row) for s in plan.shards] == [
        ("a.parquet", 0, 3, 0),
        ("b.parquet", 0, 2, 0),
    ]
    assert [s.index for s in plan.shards] == [0, 1]


@settings(max_examples=40, deadline=None)
@given(
    groups=st.lists(st.integers(0, 40), min_size=1, max_size=6),
    min_shards=st.integers(1, 7),
    smallest=st.integers(1, 30),
)
def test_parquet_too_few_shards_are_cut_into_row_ranges(
    groups: list[int], min_shards: int, smallest: int
) -> None:
    """One file, row groups of any sizes (empty ones too), fewer shards than workers: the
    plan cuts it into even row ranges of at least `smallest` rows that may start and end
    inside row groups; reading them gives every row once, in order, at its file row."""
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "data.parquet"
        table = pa.table({"id": range(sum(groups))})
        with pq.ParquetWriter(path, table.schema) as writer:
            start = 0
            for size in groups:
                writer.write_table(table.slice(start, size))
                start += size
        with patch("thresher.sources.parquet.MIN_SPLIT_ROWS", smallest):
            src = ParquetSource(uri=str(path), shard_bytes=1 << 40, min_shards=min_shards)
            result = read_all(src, rows_per_chunk=6)
        rows = [s.rows or 0 for s in result.plan.shards]
        assert result.ids == list(range(sum(groups)))
        reader = ParquetReader(columns=("id",))
        for shard in result.plan.shards:  # a shard taken whole: the same rows
            whole = reader.read_whole(shard).column("id").to_pylist()
            assert whole == list(range(shard.first_row, shard.first_row + (shard.rows or 0)))
        assert sum(rows) == sum(groups)
        assert [c.positions.tolist() for _, c in result.chunks] == [
            c.table.column("id").to_pylist() for _, c in result.chunks
        ]
        if len(rows) > 1:
            assert len(rows) <= min_shards and min(rows) >= smallest
            assert max(rows) - min(rows) <= 1  # even ranges
        enough = sum(groups) >= 2 * smallest
        assert len(rows) == (min(min_shards, sum(groups) // smallest) if enough else 1)


def test_parquet_is_cut_by_rows_only_when_shards_are_too_few(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "data.parquet", range(10_000), row_group_size=10_000)
    plan = ParquetSource(uri=str(path), shard_bytes=1 << 40, min_shards=2).plan()
    assert [(s.start, s.stop, s.first_row, s.rows) for s in plan.shards] == [
        (0, 1, 0, 5_000),
        (0, 1, 5_000, 5_000),
    ]
    small = write_rows(tmp_path / "small.parquet", range(8_000), row_group_size=8_000)
    assert len(ParquetSource(str(small), 1 << 40, min_shards=2).plan().shards) == 1  # < 2 x 4,096
    groups = write_rows(tmp_path / "groups.parquet", range(10_000), row_group_size=2_500)
    plan = ParquetSource(str(groups), shard_bytes=1, min_shards=2).plan()  # 4 already
    assert [(s.start, s.stop, s.rows) for s in plan.shards] == [(g, g + 1, 2_500) for g in range(4)]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_text_input_too_small_for_its_workers_gets_smaller_byte_ranges(
    tmp_path: Path, fmt: str
) -> None:
    path = write_rows(tmp_path / f"data.{fmt}", range(200_000))  # 3-8 MB: one 64 MB shard
    assert path.stat().st_size > 2 * text.MIN_SPLIT_BYTES
    assert len(read_all(source(path, fmt)).plan.shards) == 1
    halves = read_all(source(path, fmt, min_shards=2))
    assert len(halves.plan.shards) == 2 and halves.ids == list(range(200_000))
    many = read_all(source(path, fmt, min_shards=64))
    assert 2 < len(many.plan.shards) < 64 and many.ids == list(range(200_000))
    assert min(s.stop - s.start for s in many.plan.shards[:-1]) >= text.MIN_SPLIT_BYTES
    small = write_rows(tmp_path / f"small.{fmt}", range(1_000))
    assert len(source(small, fmt, min_shards=2).plan().shards) == 1  # under 1 MiB a shard


def test_parquet_locate_gives_file_rows(tmp_path: Path) -> None:
    write_rows(tmp_path / "in" / "a.parquet", range(100), row_group_size=10)
    write_rows(tmp_path / "in" / "b.parquet", range(100, 160), row_group_size=10)
    result = read_all(ParquetSource(uri=str(tmp_path / "in"), shard_bytes=1), rows_per_chunk=7)
    later = [s for s, _ in result.chunks if s.first_row > 0]
    assert later, "some shards start after a file's first row"
    for shard, chunk in result.chunks:
        offset = 0 if shard.path.endswith("a.parquet") else 100
        for position, row_id in zip(
            chunk.positions, chunk.table.column("id").to_pylist(), strict=True
        ):
            kind, number = result.reader.locate(shard, int(position))
            assert (kind, number) == ("row", row_id - offset)


def test_parquet_reader_reads_only_the_columns_asked(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "data.parquet", range(10))
    src = source(path)
    plan = src.plan()
    chunk = next(src.reader(plan.schema, ["b", "id"]).read(plan.shards[0], 100))
    assert chunk.table.schema.names == ["b", "id"]


def test_parquet_missing_column_is_a_source_error(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "data.parquet", range(10))
    src = source(path)
    plan = src.plan()
    with pytest.raises(SourceError, match="missing column"):
        next(src.reader(plan.schema, ["id", "nope"]).read(plan.shards[0], 100))


def test_not_a_parquet_file_is_a_source_error(tmp_path: Path) -> None:
    path = write_bytes(tmp_path / "data.parquet", b"id,a\n1,2\n")
    with pytest.raises(SourceError, match="not a readable Parquet file") as info:
        source(path).plan()
    assert str(path) in str(info.value)


# --- text planning: byte ranges aligned to line starts -------------------------------------


@dataclass
class TextFile:
    data: bytes
    lines: list[bytes]  # the file's lines, 1-based line n is lines[n - 1]
    line_of: dict[int, int]  # record id -> 1-based line number
    bad_lines: list[int] = field(default_factory=list)  # 1-based numbers of `BAD` lines


BAD = b"oops"  # a bad record in CSV (one column of three) and in JSONL (not JSON)


@st.composite
def text_files(draw: st.DrawFn, fmt: str) -> TextFile:
    n = draw(st.integers(1, 40))
    pads = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    blanks = set(draw(st.lists(st.integers(0, n), max_size=4)))
    bad = set(draw(st.lists(st.integers(0, n - 1), max_size=3)))
    crlf = draw(st.booleans())
    trailing = draw(st.booleans())
    lines: list[bytes] = [b"id,x,pad"] if fmt == "csv" else []
    line_of: dict[int, int] = {}
    bad_lines: list[int] = []
    for i in range(n):
        if i in blanks:
            lines.append(b"")
        if i in bad:
            lines.append(BAD)
            bad_lines.append(len(lines))
        pad = "p" * pads[i]
        if fmt == "csv":
            lines.append(f"{i},{i * 1.5},{pad}".encode())
        else:
            lines.append(json.dumps({"id": i, "x": i * 1.5, "pad": pad}).encode())
        line_of[i] = len(lines)
    end = b"\r\n" if crlf else b"\n"
    data = end.join(lines) + (end if trailing else b"")
    return TextFile(data=data, lines=data.split(b"\n"), line_of=line_of, bad_lines=bad_lines)


def check_text_shards(plan: Plan, file: TextFile, shard_bytes: int, header: bool) -> None:
    data, shards = file.data, plan.shards
    first_start = data.index(b"\n") + 1 if header else 0
    assert shards[0].start == first_start
    assert shards[-1].stop == len(data)
    for before, after in pairwise(shards):
        assert before.stop == after.start
    for shard in shards:
        assert shard.start < shard.stop
        assert shard.start == first_start or data[shard.start - 1 : shard.start] == b"\n"
        if shard is not shards[-1]:
            # the shard ends with the line that holds byte start + shard_bytes
            last_line_start = data.rfind(b"\n", 0, shard.stop - 1) + 1
            assert last_line_start <= shard.start + shard_bytes < shard.stop


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@settings(max_examples=30, deadline=None)
@given(
    data=st.data(),
    shard_bytes=st.integers(1, 300),
    rows_per_chunk=st.integers(1, 12),
    read_block=st.one_of(st.integers(1, 100), st.just(lines.READ_BLOCK)),
)
def test_text_byte_ranges_read_every_record_once(
    fmt: str, data: st.DataObject, shard_bytes: int, rows_per_chunk: int, read_block: int
) -> None:
    """Shards are byte ranges cut at line starts, read in blocks of whole lines (a small
    READ_BLOCK makes shards span many blocks and lines span blocks)."""
    file = data.draw(text_files(fmt))
    text_format = CsvFormat() if fmt == "csv" else JsonlFormat()
    with tempfile.TemporaryDirectory() as folder, patch.object(lines, "READ_BLOCK", read_block):
        path = Path(folder) / f"data.{fmt}"
        path.write_bytes(file.data)
        src = TextSource(
            uri=str(path), format=text_format, shard_bytes=shard_bytes, features=("x",)
        )
        result = read_all(src, rows_per_chunk)
        check_text_shards(result.plan, file, shard_bytes, header=fmt == "csv")
        assert result.ids == sorted(file.line_of)
        assert [(b.line, b.raw) for b in result.bad] == [(n, BAD.decode()) for n in file.bad_lines]
        for shard, chunk in result.chunks:
            ids = chunk.table.column("id").to_pylist()
            for position, row_id in zip(chunk.positions, ids, strict=True):
                kind, line = result.reader.locate(shard, int(position))
                assert (kind, line) == ("line", file.line_of[row_id])
        xs = [x for _, c in result.chunks for x in c.table.column("x").to_pylist()]
        assert xs == [i * 1.5 for i in sorted(file.line_of)]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_text_shards_split_at_line_starts(tmp_path: Path, fmt: str) -> None:
    path = write_rows(tmp_path / f"data.{fmt}", range(2000))
    data = path.read_bytes()
    plan = source(path, shard_bytes=4096).plan()
    assert len(plan.shards) == pytest.approx(len(data) / 4096, abs=2)
    assert all(s.path == str(path) for s in plan.shards)
    file = TextFile(data=data, lines=data.split(b"\n"), line_of={})
    check_text_shards(plan, file, 4096, header=fmt == "csv")


def test_csv_header_is_skipped_in_the_first_shard_of_each_file(tmp_path: Path) -> None:
    write_rows(tmp_path / "in" / "a.csv", range(300))
    write_rows(tmp_path / "in" / "b.csv", range(300, 600))
    result = read_all(source(tmp_path / "in", "csv", shard_bytes=1024))
    header = len(b"id,a,b\n")
    by_file: dict[str, list[Shard]] = {}
    for shard in result.plan.shards:
        by_file.setdefault(Path(shard.path).name, []).append(shard)
    assert [shards[0].start for shards in by_file.values()] == [header, header]
    assert all(len(shards) > 1 for shards in by_file.values())
    assert result.ids == list(range(600))


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_text_locate_counts_lines_in_later_shards(tmp_path: Path, fmt: str) -> None:
    """1-based file lines; for CSV the header is line 1, so id i sits on line i + 2."""
    write_rows(tmp_path / "in" / f"a.{fmt}", range(200))
    write_rows(tmp_path / "in" / f"b.{fmt}", range(200, 300))
    result = read_all(source(tmp_path / "in", fmt, shard_bytes=1024), rows_per_chunk=13)
    header = 1 if fmt == "csv" else 0
    later = [s for s, _ in result.chunks if s.start > 100]
    assert later
    for shard, chunk in result.chunks:
        offset = 0 if shard.path.endswith(f"a.{fmt}") else 200
        for position, row_id in zip(
            chunk.positions, chunk.table.column("id").to_pylist(), strict=True
        ):
            kind, line = result.reader.locate(shard, int(position))
            assert type(line) is int
            assert (kind, line) == ("line", row_id - offset + 1 + header)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rows_per_chunk", [1, 7, 64, 10_000])
def test_rows_per_chunk_bounds_chunks(tmp_path: Path, fmt: str, rows_per_chunk: int) -> None:
    path = write_rows(tmp_path / f"data.{fmt}", range(300), row_group_size=100)
    result = read_all(source(path), rows_per_chunk)
    sizes = [c.table.num_rows for _, c in result.chunks]
    assert max(sizes) == min(rows_per_chunk, 300)
    assert sum(sizes) == 300
    assert result.ids == list(range(300))


# --- column types --------------------------------------------------------------------------

TYPED_ROWS = [{"id": i, "a": i, "b": 2 * i, "segment": i % 3} for i in range(20)]


def write_typed(path: Path) -> Path:
    if path.suffix == ".csv":
        lines = ["id,a,b,segment", *(",".join(str(v) for v in r.values()) for r in TYPED_ROWS)]
        return write_bytes(path, ("\n".join(lines) + "\n").encode())
    return write_bytes(path, "".join(json.dumps(r) + "\n" for r in TYPED_ROWS).encode())


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_listed_model_inputs_read_as_float64(tmp_path: Path, fmt: str) -> None:
    path = write_typed(tmp_path / f"data.{fmt}")
    result = read_all(source(path, columns=["a"], keep=["segment"]))
    types = {f.name: f.type for f in result.plan.schema}
    assert types == {"id": pa.int64(), "a": pa.float64(), "b": pa.int64(), "segment": pa.int64()}
    table = pa.concat_tables(c.table for _, c in result.chunks)
    assert table.schema == result.plan.schema
    assert table.column("a").to_pylist() == [float(r["a"]) for r in TYPED_ROWS]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_every_other_column_is_a_float64_input(tmp_path: Path, fmt: str) -> None:
    path = write_typed(tmp_path / f"data.{fmt}")
    result = read_all(source(path, keep=["segment"]))
    types = {f.name: f.type for f in result.plan.schema}
    assert types == {
        "id": pa.int64(),
        "a": pa.float64(),
        "b": pa.float64(),
        "segment": pa.int64(),
    }
    table = pa.concat_tables(c.table for _, c in result.chunks)
    assert table.column("b").to_pylist() == [float(r["b"]) for r in TYPED_ROWS]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_float_after_an_all_int_sample_is_kept(tmp_path: Path, fmt: str) -> None:
    """The sample holds only ints; a later fractional value must not become a bad row."""
    rows = [{"id": i, "a": i} for i in range(100_000)] + [{"id": 100_000, "a": 0.25}]
    if fmt == "csv":
        text = "id,a\n" + "".join(f"{r['id']},{r['a']}\n" for r in rows)
    else:
        text = "".join(json.dumps(r) + "\n" for r in rows)
    assert len(text) > 1 << 20
    path = write_bytes(tmp_path / f"data.{fmt}", text.encode())
    result = read_all(source(path))
    assert result.bad == []
    table = pa.concat_tables(c.table for _, c in result.chunks)
    assert table.column("a").to_pylist()[-2:] == [99_999.0, 0.25]


# --- compressed and mismatched files -------------------------------------------------------


def test_a_stray_word_in_a_csv_id_column_makes_one_bad_line_not_a_text_column(
    tmp_path: Path,
) -> None:
    lines = ["id,a"] + [f"{i},{i / 2}" for i in range(300)]
    lines[11] = "id-10,5.0"
    path = write_bytes(tmp_path / "ids.csv", ("\n".join(lines) + "\n").encode())
    result = read_all(source(path, "csv"))
    assert result.plan.schema.field("id").type == pa.int64()
    assert result.ids == [i for i in range(300) if i != 10]
    assert [b.where() for b in result.bad] == [f"{path} line 12"]
    # A few lines are not enough to call a word a stray: the column stays text.
    short = write_bytes(tmp_path / "short.csv", b"id,a\n1,0.5\n2,1.5\nx-3,2.5\n")
    assert source(short, "csv").plan().schema.field("id").type == pa.string()
    # JSON strings are text by their own type, however many look like numbers.
    lines = [f'{{"id": "{i}", "a": 1.0}}' for i in range(300)]
    quoted = write_bytes(tmp_path / "quoted.jsonl", ("\n".join(lines) + "\n").encode())
    assert source(quoted, "jsonl").plan().schema.field("id").type == pa.string()


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_gzip_input(tmp_path: Path, fmt: str) -> None:
    write_rows(tmp_path / "in" / f"a.{fmt}.gz", range(400))
    write_rows(tmp_path / "in" / f"b.{fmt}.gz", range(400, 500))
    result = read_all(source(tmp_path / "in", fmt, shard_bytes=1024), rows_per_chunk=50)
    assert [(Path(s.path).name, s.stop) for s in result.plan.shards] == [
        (f"a.{fmt}.gz", -1),
        (f"b.{fmt}.gz", -1),
    ]
    assert result.ids == list(range(500))
    header = 1 if fmt == "csv" else 0
    shard, chunk = result.chunks[-1]
    kind, line = result.reader.locate(shard, int(chunk.positions[-1]))
    assert (kind, line) == ("line", 100 + header)


def test_gzip_csv_single_file_inferred_from_suffix(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "data.csv.gz", range(50))
    result = read_all(source(path))
    assert result.ids == list(range(50))
    assert result.plan.schema.field("a").type == pa.float64()


def test_csv_header_differing_from_the_first_file(tmp_path: Path) -> None:
    write_rows(tmp_path / "in" / "a.csv", range(10))
    other = write_bytes(tmp_path / "in" / "b.csv", b"id,b,a\n1,2,3\n")
    with pytest.raises(SourceError) as info:
        source(tmp_path / "in", "csv").plan()
    assert str(info.value) == f"{other} line 1: header differs from the first file's"


def test_csv_with_crlf_header_matches_lf_header(tmp_path: Path) -> None:
    write_rows(tmp_path / "in" / "a.csv", range(10))
    write_bytes(tmp_path / "in" / "b.csv", b"id,a,b\r\n10,1,2\r\n11,3,4\r\n")
    assert read_all(source(tmp_path / "in", "csv")).ids == list(range(12))


def test_text_file_with_no_records(tmp_path: Path) -> None:
    path = write_bytes(tmp_path / "data.csv", b"id,a,b\n\n")
    with pytest.raises(SourceError, match="no records"):
        source(path).plan()


# --- bad records ---------------------------------------------------------------------------


@dataclass
class BadLine:
    raw: bytes
    error: str
    message: str  # a fragment the message must hold


CSV_BAD = {
    "too few columns": BadLine(b"-1,0.5", "ValueError", "expected 3 columns (id, a, b), got 2"),
    "too many columns": BadLine(b"-1,1,2,3", "ValueError", "expected 3 columns (id, a, b), got 4"),
    "not a number": BadLine(b"-1,abc,2", "ValueError", "column 'a': invalid value 'abc'"),
    "not a number in b": BadLine(b"-1,1,2x", "ValueError", "column 'b': invalid value '2x'"),
    "invalid utf-8": BadLine(b"-1,\xff\xfe,2", "UnicodeDecodeError", "invalid UTF-8"),
}
JSONL_BAD = {
    "invalid json": BadLine(b'{"id": -1, "a": ', "ArrowInvalid", "JSON parse error"),
    "not an object": BadLine(b"[1, 2, 3]", "ArrowInvalid", "JSON parse error"),
    "string for a number": BadLine(b'{"id": -1, "a": "high", "b": 1}', "ArrowInvalid", "/a"),
    "invalid utf-8": BadLine(b'{"id": -1, "a": 1, "b": "\xff"}', "UnicodeDecodeError", "UTF-8"),
}
BAD_CASES = [("csv", name) for name in CSV_BAD] + [("jsonl", name) for name in JSONL_BAD]


def line_of(fmt: str, row_id: int) -> bytes:
    if fmt == "csv":
        return f"{row_id},{row_id * 0.5},{row_id % 7}".encode()
    return json.dumps({"id": row_id, "a": row_id * 0.5, "b": row_id % 7}).encode()


def write_with_bad(path: Path, fmt: str, good: int, bad_at: dict[int, bytes]) -> dict[int, int]:
    """`good` records, with bad lines placed before the records numbered in `bad_at`.

    Returns each bad line's 1-based line number."""
    lines = [b"id,a,b"] if fmt == "csv" else []
    placed: dict[int, int] = {}
    for i in range(good):
        if i in bad_at:
            lines.append(bad_at[i])
            placed[i] = len(lines)
        lines.append(line_of(fmt, i))
    write_bytes(path, b"\n".join(lines) + b"\n")
    return placed


def check_bad(result: ReadResult, path: Path, expected: dict[int, int], case: BadLine) -> None:
    assert [(b.line, b.raw) for b in result.bad] == [
        (line, case.raw.decode("utf-8", errors="backslashreplace"))
        for line in sorted(expected.values())
    ]
    for bad in result.bad:
        assert bad.stage == "decode"
        assert bad.source == str(path)
        assert bad.error == case.error
        assert case.message in bad.message
        assert "\n" not in bad.message


@pytest.mark.parametrize(("fmt", "case"), BAD_CASES)
def test_bad_line_in_the_inference_sample(tmp_path: Path, fmt: str, case: str) -> None:
    bad_line = (CSV_BAD if fmt == "csv" else JSONL_BAD)[case]
    path = tmp_path / f"data.{fmt}"
    placed = write_with_bad(path, fmt, 200, {1: bad_line.raw, 50: bad_line.raw})
    result = read_all(source(path), rows_per_chunk=64)
    assert result.ids == list(range(200))
    check_bad(result, path, placed, bad_line)
    assert {f.name: f.type for f in result.plan.schema} == {
        "id": pa.int64(),
        "a": pa.float64(),
        "b": pa.float64(),
    }


@pytest.mark.parametrize(("fmt", "case"), BAD_CASES)
def test_bad_line_far_after_the_sample(tmp_path: Path, fmt: str, case: str) -> None:
    """Past the first MiB (the inference sample), in a later shard, among good lines."""
    bad_line = (CSV_BAD if fmt == "csv" else JSONL_BAD)[case]
    path = tmp_path / f"data.{fmt}"
    good = 80_000
    placed = write_with_bad(path, fmt, good, {75_000: bad_line.raw, 75_001: bad_line.raw})
    assert path.read_bytes().index(bad_line.raw) > SAMPLE_BYTES
    result = read_all(source(path, shard_bytes=256 * 1024), rows_per_chunk=20_000)
    assert len(result.plan.shards) > 4
    assert len(result.ids) == good
    assert result.ids == list(range(good))
    check_bad(result, path, placed, bad_line)


def test_many_kinds_of_bad_csv_lines_at_once(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    bad_at = {3 * k + 2: case.raw for k, case in enumerate(CSV_BAD.values())}
    placed = write_with_bad(path, "csv", 40, bad_at)
    result = read_all(source(path), rows_per_chunk=8)
    assert result.ids == list(range(40))
    assert [b.line for b in result.bad] == sorted(placed.values())
    assert [b.error for b in result.bad] == [c.error for c in CSV_BAD.values()]
    for bad, case in zip(result.bad, CSV_BAD.values(), strict=True):
        assert case.message in bad.message


def test_bad_lines_with_crlf_endings(tmp_path: Path) -> None:
    path = write_bytes(tmp_path / "data.csv", b"id,a,b\r\n0,1,2\r\n1,x,2\r\n2,3\r\n3,4,5\r\n")
    result = read_all(source(path))
    assert result.ids == [0, 3]
    assert [(b.line, b.raw) for b in result.bad] == [(3, "1,x,2"), (4, "2,3")]


def test_bad_line_without_a_trailing_newline(tmp_path: Path) -> None:
    path = write_bytes(tmp_path / "data.jsonl", b'{"id": 0, "a": 1}\n{"id": 1, "a": ')
    result = read_all(source(path))
    assert result.ids == [0]
    assert [(b.line, b.raw) for b in result.bad] == [(2, '{"id": 1, "a": ')]


def test_chunk_positions_skip_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    write_with_bad(path, "csv", 6, {2: b"oops", 4: b"1,2"})
    result = read_all(source(path))
    positions = [int(p) for _, c in result.chunks for p in c.positions]
    # lines after the header: 0,1 | bad | 2,3 | bad | 4,5
    assert positions == [0, 1, 3, 4, 6, 7]


def test_raw_is_cut_to_one_kib_in_json() -> None:
    bad = BadRecord(
        source="data.csv", stage="decode", error="ValueError", message="m", raw="é" * 3000, line=7
    )
    data = json.loads(bad.to_json())
    assert data["raw"] == "é" * RAW_LIMIT
    assert RAW_LIMIT == 1024
    assert data["line"] == 7
    assert data["id"] is None
    assert "row" not in data
    assert bad.raw == "é" * 3000  # the record itself keeps everything


def test_long_bad_line_is_cut_in_the_error_file(tmp_path: Path) -> None:
    long = b"-1,1,2," + b"9" * 5000
    path = tmp_path / "data.csv"
    write_with_bad(path, "csv", 10, {5: long})
    result = read_all(source(path))
    [bad] = result.bad
    assert bad.raw == long.decode()
    assert json.loads(bad.to_json())["raw"] == long[:RAW_LIMIT].decode()
    assert result.ids == list(range(10))


def test_bad_record_where() -> None:
    common: dict[str, Any] = {"source": "d.csv", "stage": "decode", "error": "E", "message": "m"}
    assert BadRecord(**common, line=3).where() == "d.csv line 3"
    assert BadRecord(**common, row=0).where() == "d.csv row 0"
    assert BadRecord(**common).where() == "d.csv"


def test_positions_are_integers(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "data.csv", range(5))
    [(_, chunk)] = read_all(source(path)).chunks
    assert chunk.positions.dtype == np.int64
