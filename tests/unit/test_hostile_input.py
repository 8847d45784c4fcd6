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

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_sources import line_of, read_all, source, write_bytes, write_rows

from thresher.errors import SourceError
from thresher.sources import lines
from thresher.sources.base import MAX_COLUMNS
from thresher.sources.nesting import MAX_DEPTH
from thresher.sources.text import SAMPLE_BYTES
from thresher.spec import SourceSection

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


def test_a_json_key_of_invalid_utf8_is_one_bad_record(tmp_path: Path) -> None:
    """Found by scripts/fuzz_readers.py: Arrow inferred a column named with the bytes, and
    listing the schema's names raised UnicodeDecodeError out of planning."""
    lines_ = [json.dumps({"id": i, "a": 1.0}).encode() for i in range(4)]
    lines_.insert(2, b'{"id": 9, "a": 1.0, "k\x97": 1}')
    result = read_all(source(write_bytes(tmp_path / "k.jsonl", b"\n".join(lines_) + b"\n")))
    assert result.ids == [0, 1, 2, 3] and result.plan.schema.names == ["id", "a"]
    assert [(b.line, b.error) for b in result.bad] == [(3, "UnicodeDecodeError")]


# --- ids stay exact integers ---------------------------------------------------------------

EXACT = 2**53 + 1  # the first integer a float64 cannot hold


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("stray", ["1.5", "1e30", "99999999999999999999"])
def test_ids_past_2_to_the_53_stay_exact_and_a_stray_id_is_one_bad_record(
    tmp_path: Path, fmt: str, stray: str
) -> None:
    """One stray value in the inference sample made the id column float64 for the whole
    file: ids above 2^53 were rounded, and neighbours merged into one."""
    ids = [EXACT + i for i in range(300)]
    rows = [(str(i), f"{n * 0.5}") for n, i in enumerate(ids)]
    rows.insert(5, (stray, "1.0"))
    if fmt == "csv":
        data = "id,a\n" + "".join(f"{i},{a}\n" for i, a in rows)
    else:
        data = "".join(f'{{"id": {i}, "a": {a}}}\n' for i, a in rows)
    path = write_bytes(tmp_path / f"ids.{fmt}", data.encode())
    result = read_all(source(path, fmt))
    assert result.plan.schema.field("id").type == pa.int64()
    assert result.ids == ids and len(set(result.ids)) == 300
    [bad] = result.bad
    assert bad.line == 6 + (fmt == "csv") and bad.raw.startswith(("{", stray))
    assert "column 'id'" in bad.message and stray in bad.message, bad.message


def test_a_text_id_column_stays_text(tmp_path: Path) -> None:
    lines = ["id,a", *(f"{EXACT + i}.0,1.5" for i in range(50)), "x-1,1.5"]
    path = write_bytes(tmp_path / "ids.csv", ("\n".join(lines) + "\n").encode())
    result = read_all(source(path, "csv"))
    assert result.plan.schema.field("id").type == pa.string()
    assert result.ids == [f"{EXACT + i}.0" for i in range(50)] + ["x-1"]


# --- wide inputs ---------------------------------------------------------------------------

PLAN_SCRIPT = """
import sys, time
from thresher.sources import feature_columns, open_source
from thresher.spec import SourceSection

section = SourceSection(uri=sys.argv[1], id_column="c0", options={"max_columns": 10**6})
started = time.perf_counter()
plan = open_source(section, ["c1"], 1).plan()
features = feature_columns(section, plan.schema, ["c1"])
print(time.perf_counter() - started, len(features))
"""


def plan_seconds(path: Path, timeout: float) -> float:
    """Seconds to plan `path` and pick its features, in a subprocess killed at `timeout`."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PLAN_SCRIPT), str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    seconds, features = done.stdout.split()
    assert int(features) == int(path.stem) - 2
    return float(seconds)


def write_wide(folder: Path, columns: int) -> Path:
    header = ",".join(f"c{i}" for i in range(columns))
    rows = "".join(",".join([str(r)] + ["1.5"] * (columns - 1)) + "\n" for r in range(3))
    return write_bytes(folder / f"{columns}.csv", f"{header}\n{rows}".encode())


@pytest.mark.slow
def test_planning_time_grows_linearly_with_the_columns(tmp_path: Path) -> None:
    """Ten times the columns, about ten times as long (Arrow's CSV reader is a little
    worse than linear). The per-column list lookups planning had made it quadratic: a
    hundred times as long, many minutes, so the bound of 40 times leaves room for a busy
    machine and still fails them."""
    narrow = plan_seconds(write_wide(tmp_path, 5_000), timeout=300)
    limit = 40 * narrow + 2
    try:
        wide = plan_seconds(write_wide(tmp_path, 50_000), timeout=limit + 20)  # + start-up
    except subprocess.TimeoutExpired:
        pytest.fail(f"50,000 columns took over {limit:.0f} s; 5,000 took {narrow:.1f} s")
    assert wide < limit, f"50,000 columns: {wide:.1f} s; 5,000: {narrow:.1f} s"


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_an_input_wider_than_max_columns_is_refused_naming_file_and_count(
    tmp_path: Path, fmt: str
) -> None:
    names = [f"c{i}" for i in range(MAX_COLUMNS + 1)]
    path = tmp_path / f"wide.{fmt}"
    if fmt == "csv":
        write_bytes(path, (",".join(names) + "\n" + ",".join("1" * len(names)) + "\n").encode())
    elif fmt == "jsonl":
        write_bytes(path, json.dumps(dict.fromkeys(names, 1)).encode() + b"\n")
    else:
        pq.write_table(pa.table({n: [1] for n in names}), path)
    with pytest.raises(SourceError) as caught:
        source(path, fmt).plan()
    assert str(caught.value).startswith(f"{path}: 10,001 columns, more than the 10,000")
    assert "source.options.max_columns" in str(caught.value)
    wide = source(path, fmt, options={"max_columns": MAX_COLUMNS + 1}).plan()
    assert len(wide.schema) == MAX_COLUMNS + 1


def test_max_columns_is_a_checked_option() -> None:
    assert SourceSection(uri="in.csv", options={"max_columns": 50_000}).options
    with pytest.raises(ValueError, match=r"options\.max_colums: unknown key"):
        SourceSection(uri="in.csv", options={"max_colums": 5})
    with pytest.raises(ValueError, match=r"options\.max_columns"):
        SourceSection(uri="in.csv", options={"max_columns": 0})


def test_a_bad_line_of_a_wide_csv_does_not_repeat_the_header(tmp_path: Path) -> None:
    names = ["id"] + [f"feature_{i}" for i in range(2_000)]
    good = ",".join(["1"] + ["0.5"] * 2_000)
    path = write_bytes(tmp_path / "w.csv", "\n".join([",".join(names), good, "2,0.5"]).encode())
    [bad] = read_all(source(path, "csv")).bad
    assert bad.message.startswith("expected 2001 columns (id, feature_0, feature_1,")
    assert bad.message.endswith(", feature_18 and 1,981 more), got 2"), bad.message


# --- long records, empty files, headers, quotes ---------------------------------------------


def test_a_first_jsonl_record_over_a_mib_is_read(tmp_path: Path) -> None:
    """The inference sample was the first MiB: with no complete line in it, the whole
    file failed ("no readable record in the first lines")."""
    first = json.dumps({"id": 0, "a": 1.0, "t": "x" * (2 * SAMPLE_BYTES)}).encode()
    rest = [json.dumps({"id": i, "a": 1.0, "t": "y"}).encode() for i in range(1, 5)]
    path = write_bytes(tmp_path / "big.jsonl", b"\n".join([first, *rest]) + b"\n")
    result = read_all(source(path))
    assert result.ids == [0, 1, 2, 3, 4] and result.bad == []


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("where", [0, 3, 9])  # the first record, the middle, the last
@pytest.mark.parametrize("read_block", [1000, 1 << 20])  # the line spans blocks, or not
def test_a_record_longer_than_max_record_bytes_is_one_bad_record(
    tmp_path: Path, fmt: str, where: int, read_block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lines, "MAX_RECORD_BYTES", 4096)
    monkeypatch.setattr(lines, "READ_BLOCK", read_block)
    body = [line_of(fmt, i) for i in range(10)]
    body[where] = line_of(fmt, where)[:-1] + b"9" * 10_000 + line_of(fmt, where)[-1:]
    header = [b"id,a,b"] if fmt == "csv" else []
    path = write_bytes(tmp_path / f"long.{fmt}", b"\n".join(header + body) + b"\n")
    result = read_all(source(path, shard_bytes=1024))
    assert result.ids == [i for i in range(10) if i != where]
    [bad] = result.bad
    assert (bad.line, bad.error) == (where + 1 + len(header), "RecordTooLong")
    assert bad.message == "a record longer than 4,096 bytes"
    assert bad.raw.startswith(line_of(fmt, where)[:5].decode()) and len(bad.raw) <= 1024


@pytest.mark.parametrize("data", [b"", b"id,a,b\n", b"id,a,b", b"\n\n"])
def test_an_empty_csv_says_so(tmp_path: Path, data: bytes) -> None:
    path = write_bytes(tmp_path / "empty.csv", data)
    with pytest.raises(SourceError) as caught:
        source(path).plan()
    assert str(caught.value) == f"{path}: no records to infer the columns from"


def test_empty_csv_files_beside_others_hold_no_records(tmp_path: Path) -> None:
    write_bytes(tmp_path / "in" / "a.csv", b"")
    write_bytes(tmp_path / "in" / "b.csv", b"id,a,b\n")
    write_rows(tmp_path / "in" / "c.csv", range(5))
    write_bytes(tmp_path / "in" / "d.csv", b"")
    result = read_all(source(tmp_path / "in", "csv"))
    assert result.ids == list(range(5))
    assert {Path(s.path).name for s in result.plan.shards} == {"c.csv"}
    with pytest.raises(SourceError, match=r"none of the 2 files of .*: no records"):
        source(f"{tmp_path}/in/[ab].csv", "csv").plan()


def test_duplicate_csv_header_names_are_refused_by_name(tmp_path: Path) -> None:
    path = write_bytes(tmp_path / "dup.csv", b"id,a,b,a,b,c\n1,2,3,4,5,6\n")
    with pytest.raises(SourceError) as caught:
        source(path).plan()
    assert str(caught.value) == f"{path} line 1: duplicate column names 'a', 'b'"


def test_an_unreadable_csv_header_is_refused_naming_line_1(tmp_path: Path) -> None:
    path = write_bytes(tmp_path / "h.csv", b'id,"a,b\n1,2,3\n')
    with pytest.raises(SourceError) as caught:
        source(path).plan()
    assert str(caught.value).startswith(f"{path} line 1: cannot read the header: ")


@pytest.mark.parametrize("at", [1, 150, 299])  # in the sample; past it; the last line
def test_an_unterminated_quote_is_a_bad_record_not_a_value(tmp_path: Path, at: int) -> None:
    """Arrow took the newline, and every line after it up to the next quote, into the
    open quote's value; alone on its line the value was accepted with a newline in it."""
    lines_ = [b"id,a,t", *(f'{i},{i * 0.5},"tag {i}"'.encode() for i in range(300))]
    lines_[at + 1] = f'{at},0.5,"open {at}'.encode()
    path = write_bytes(tmp_path / "q.csv", b"\n".join(lines_) + (b"\n" if at < 299 else b""))
    result = read_all(source(path, keep=["t"], shard_bytes=4096))
    assert result.ids == [i for i in range(300) if i != at]
    [bad] = result.bad
    assert (bad.line, bad.raw) == (at + 2, f'{at},0.5,"open {at}')
    assert bad.message == "column 't': a quote is opened and never closed"


def test_quotes_arrow_reads_leniently_are_still_values(tmp_path: Path) -> None:
    path = write_bytes(tmp_path / "q.csv", b'id,a,t\n1,0.5,5" screen\n2,0.5,"a ""b"", c"\n')
    result = read_all(source(path, keep=["t"]))
    table = pa.concat_tables(c.table for _, c in result.chunks)
    assert table.column("t").to_pylist() == ['5" screen', 'a "b", c'] and result.bad == []
