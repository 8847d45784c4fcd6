"""A corrupt corpus, CSV and JSONL: good lines interleaved with every kind of bad record.

Bad lines sit inside the schema-inference sample (the first lines), in the middle, and
past the sample (beyond `SAMPLE_BYTES`), across many shards read by two workers. The
promise under test is the durability one: every input line ends in exactly one place —
the output (good lines, once, in input order) or `_errors/` (bad lines, once, with their
1-based line number, stage, source file and raw text) — and the manifest's counts add up.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from thresher.sources.text import SAMPLE_BYTES

from .support import Output, Workspace

pytestmark = pytest.mark.e2e

GOOD = 14_000  # enough ~90-byte lines that the file runs well past SAMPLE_BYTES
SHARD_BYTES = 96 * 1024
TAGS = [f"segment-{name}-{'x' * 30}" for name in ("retail", "premium", "small-business")]

# The model's sentinels: a = 666 makes it raise; 777, 888, 999 give NaN, +inf, -inf.
MODEL = """
import numpy as np


class Sentinels:
    def predict(self, batch):
        a, b = batch["a"], batch["b"]
        if (a == 666.0).any():
            raise ValueError("a = 666 is out of range for this model")
        out = 2.0 * a + b
        out[a == 777.0] = np.nan
        out[a == 888.0] = np.inf
        out[a == 999.0] = -np.inf
        return {"prediction": out}
"""


@dataclass(frozen=True)
class Row:
    id: int
    a: float
    b: float
    tag: str


@dataclass(frozen=True)
class Kind:
    """One kind of bad record: how to write it, and where thresher must file it."""

    name: str
    make: Callable[[Row], bytes]
    stage: str  # "decode" or "predict"
    error: str | None = None  # the expected error type, where it is fixed
    parse: bool = True  # a parse error (raw is the line) rather than a bad value in a row
    in_sample: bool = True  # also placed inside the schema-inference sample


_ABSENT = object()  # a key left out of a JSON record


def _csv(row: Row) -> bytes:
    return f"{row.id},{row.a!r},{row.b!r},{row.tag}".encode()


def _jsonl(row: Row, **change: Any) -> bytes:
    record: dict[str, Any] = {"id": row.id, "a": row.a, "b": row.b, "tag": row.tag}
    for key, value in change.items():
        if value is _ABSENT:
            record.pop(key)
        else:
            record[key] = value
    return json.dumps(record).encode()


CSV_KINDS = [
    Kind("too few columns", lambda r: f"{r.id},{r.a!r}".encode(), "decode"),
    Kind("too many columns", lambda r: _csv(r) + b",surplus", "decode"),
    Kind("text in a number column", lambda r: f"{r.id},abc,{r.b!r},{r.tag}".encode(), "decode"),
    # Past the sample only: inside it, CSV inference makes the whole id column text
    # (see test_text_in_a_csv_id_column_inside_the_sample_is_one_bad_record).
    Kind(
        "text in the id column",
        lambda r: f"id-{r.id},{r.a!r},{r.b!r},{r.tag}".encode(),
        "decode",
        in_sample=False,
    ),
    Kind(
        "invalid UTF-8 in text",
        lambda r: f"{r.id},{r.a!r},{r.b!r},caf".encode() + b"\xe9",
        "decode",
        "UnicodeDecodeError",
    ),
    Kind(
        "invalid UTF-8 in a number",
        lambda r: f"{r.id},".encode() + b"\xff\xfe1.5" + f",{r.b!r},{r.tag}".encode(),
        "decode",
        "UnicodeDecodeError",
    ),
    Kind(
        "empty model input",
        lambda r: f"{r.id},,{r.b!r},{r.tag}".encode(),
        "decode",
        "MissingValue",
        parse=False,
    ),
]
JSONL_KINDS = [
    Kind("string for a number", lambda r: _jsonl(r, a="abc"), "decode"),
    Kind("string for the id", lambda r: _jsonl(r, id=f"id-{r.id}"), "decode"),
    Kind("truncated object", lambda r: _jsonl(r)[:-12], "decode"),
    Kind("trailing comma", lambda r: _jsonl(r)[:-1] + b",}", "decode"),
    Kind("bare array", lambda r: b"[1, 2, 3]", "decode"),
    Kind("bare number", lambda r: b"42", "decode"),
    Kind("bare string", lambda r: b'"hello"', "decode"),
    Kind("bare null", lambda r: b"null", "decode"),
    Kind(
        "invalid UTF-8",
        lambda r: _jsonl(r, tag="caf")[:-2] + b'\xe9"}',
        "decode",
        "UnicodeDecodeError",
    ),
    Kind(
        "model input absent",
        lambda r: _jsonl(r, a=_ABSENT),
        "decode",
        "MissingValue",
        parse=False,
    ),
    Kind("model input null", lambda r: _jsonl(r, a=None), "decode", "MissingValue", parse=False),
]


def model_kinds(write: Callable[[Row], bytes]) -> list[Kind]:
    """Rows that parse but that the model must not score: the same four in each format."""

    def with_a(a: float) -> Callable[[Row], bytes]:
        return lambda r: write(Row(r.id, a, r.b, r.tag))

    return [
        Kind("model raises", with_a(666.0), "predict", "ValueError", parse=False),
        Kind("NaN prediction", with_a(777.0), "predict", "NonFinitePrediction", parse=False),
        Kind("+inf prediction", with_a(888.0), "predict", "NonFinitePrediction", parse=False),
        Kind("-inf prediction", with_a(999.0), "predict", "NonFinitePrediction", parse=False),
    ]


def kinds_for(fmt: str) -> list[Kind]:
    if fmt == "csv":
        return CSV_KINDS + model_kinds(_csv)
    return JSONL_KINDS + model_kinds(_jsonl)


@dataclass(frozen=True)
class Bad:
    line: int  # 1-based, as thresher must report it
    kind: Kind
    raw: bytes
    id: int


@dataclass(frozen=True)
class Corpus:
    fmt: str
    workspace: Workspace
    path: Path
    spec: Path
    records: int  # input records, header not counted
    good: list[Row]  # in file order
    bad: list[Bad]  # in file order

    def figures(self, found: int | None = None) -> str:
        seen = "" if found is None else f" found_in_errors={found}"
        return f"[{self.fmt}] lines={self.records} good={len(self.good)} bad={len(self.bad)}{seen}"


def build_corpus(root: Path, fmt: str) -> Corpus:
    """Good rows with bad ones at fixed places: every kind in the first ~100 lines, spread
    over the shards in between, and past the inference sample; the very first record is
    bad (a parse error, so `on_bad_input = "fail"` names it) and so is the last, which
    has no newline."""
    rng = np.random.default_rng(11)
    kinds = kinds_for(fmt)
    total = GOOD + 3 * len(kinds)
    ids = (rng.permutation(total) + 100_000).tolist()  # input order is not id order
    a_values = np.round(rng.uniform(-10, 10, total), 6)
    b_values = rng.uniform(-1, 1, total)
    tags = [TAGS[i] for i in rng.integers(0, len(TAGS), total)]
    rows = [Row(ids[i], float(a_values[i]), float(b_values[i]), tags[i]) for i in range(total)]

    early = [0, *range(5, 96, 90 // len(kinds))][: len(kinds)]
    spread = [1_500 + 750 * k for k in range(len(kinds))]  # about one per shard
    late = [total - 1 - 5 * k for k in range(len(kinds))]  # the last record is bad too
    chosen: dict[int, Kind] = {}
    for positions in (early, spread, late):
        for kind, at in zip(kinds, positions, strict=True):
            if kind.in_sample or positions is late:
                chosen[at] = kind
    first_kind = chosen[0]
    assert first_kind.parse and first_kind.stage == "decode"

    header = b"id,a,b,tag\n" if fmt == "csv" else b""
    offset = 1 if fmt == "csv" else 0  # the header is line 1
    body: list[bytes] = []
    good: list[Row] = []
    bad: list[Bad] = []
    late_start_byte = 0
    bad_shards: set[int] = set()  # roughly: shards cut at the line after each boundary
    size = len(header)
    for index, row in enumerate(rows):
        if index == late[-1]:
            late_start_byte = size
        if index in chosen:
            bad_shards.add(size // SHARD_BYTES)
            line = chosen[index].make(row)
            bad.append(Bad(index + 1 + offset, chosen[index], line, row.id))
        else:
            line = _csv(row) if fmt == "csv" else _jsonl(row)
            good.append(row)
        body.append(line)
        size += len(line) + 1
    path = root / f"corpus.{fmt}"
    path.write_bytes(header + b"\n".join(body))  # no newline after the last line
    assert late_start_byte > SAMPLE_BYTES, "the late bad lines must lie past the sample"
    assert path.stat().st_size > 8 * SHARD_BYTES, "the corpus should span many shards"
    assert len(bad_shards) >= 8, f"bad lines in only {len(bad_shards)} shards"

    (root / "sentinels.py").write_text(MODEL, encoding="utf-8")
    workspace = Workspace(root)
    spec = workspace.spec(
        {
            "source": {"uri": path.name, "id_column": "id", "shard_bytes": SHARD_BYTES},
            "model": {"kind": "python", "uri": "sentinels.py:Sentinels", "batch_format": "numpy"},
            "batch": {"size": 256},
            "run": {"workers": 2},
            "sink": {"uri": "out/", "keep_columns": ["tag"]},
        }
    )
    return Corpus(fmt, workspace, path, spec, total, good, bad)


@dataclass(frozen=True)
class Ran:
    corpus: Corpus
    output: Output
    stdout: str


@pytest.fixture(scope="module", params=["csv", "jsonl"])
def ran(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Ran:
    fmt = request.param
    corpus = build_corpus(tmp_path_factory.mktemp(f"corrupt-{fmt}"), fmt)
    result = corpus.workspace.run("run", corpus.spec)
    assert result.returncode == 0, f"{corpus.figures()}\n{result.stdout}\n{result.stderr}"
    output = corpus.workspace.read_dir(corpus.workspace.root / "out", "parquet")
    return Ran(corpus, output, result.stdout)


def test_every_bad_line_is_in_errors_once_with_where_and_why(ran: Ran) -> None:
    corpus, errors = ran.corpus, ran.output.errors
    figures = corpus.figures(found=len(errors))
    counts = Counter(int(record.get("line") or 0) for record in errors)  # 0: no line
    expected = {b.line: b for b in corpus.bad}
    twice = sorted(line for line, n in counts.items() if n > 1)
    missing = sorted(f"{b.line} ({b.kind.name})" for b in corpus.bad if b.line not in counts)
    unexpected = sorted(str(line) for line in counts if line not in expected)
    assert (twice, missing, unexpected) == ([], [], []), (
        f"{figures}: twice {twice}, missing {missing}, not bad {unexpected}"
    )
    for record in errors:
        bad = expected[record["line"]]
        where = f"{figures}: line {bad.line} ({bad.kind.name}): {record}"
        assert record["source"] == str(corpus.path), where
        assert record["stage"] == bad.kind.stage, where
        assert record["message"], where
        if bad.kind.error:
            assert record["error"] == bad.kind.error, where
        if bad.kind.parse:
            assert record["raw"] == bad.raw.decode("utf-8", errors="backslashreplace"), where
            assert record["id"] is None, where
        else:
            assert record["id"] == bad.id, where
            assert json.loads(record["raw"])["id"] == bad.id, where
        if bad.kind.error == "NonFinitePrediction":
            assert "'prediction'" in record["message"], where


def test_every_good_line_is_in_the_output_once_in_input_order(ran: Ran) -> None:
    corpus, table = ran.corpus, ran.output.table
    figures = corpus.figures(found=len(ran.output.errors))
    want = [row.id for row in corpus.good]
    got = table.column("id").to_pylist()
    counts = Counter(got)
    assert sum(counts.values()) == len(counts), f"{figures}: ids written twice"
    assert set(got) == set(want), (
        f"{figures}: lost {len(set(want) - set(got))}, strays {len(set(got) - set(want))}"
    )
    assert got == want, f"{figures}: the output is not in input order"
    assert table.column("tag").to_pylist() == [row.tag for row in corpus.good]
    expected = [2.0 * row.a + row.b for row in corpus.good]
    np.testing.assert_allclose(table.column("prediction").to_numpy(), expected, rtol=1e-12)


def test_manifest_counts_add_up(ran: Ran) -> None:
    corpus, manifest = ran.corpus, ran.output.manifest
    figures = corpus.figures(found=len(ran.output.errors))
    assert manifest is not None, f"{figures}: no _SUCCESS"
    counts = (manifest["rows_in"], manifest["rows_out"], manifest["rows_error"])
    assert counts == (corpus.records, len(corpus.good), len(corpus.bad)), f"{figures}: {counts}"
    assert manifest["rows_in"] == manifest["rows_out"] + manifest["rows_error"]
    assert manifest["shards"] >= 8, f"{figures}: only {manifest['shards']} shard(s)"
    out = corpus.workspace.root / "out"
    assert not (out / "_staging").exists() and not (out / "_errors" / "_staging").exists()
    assert f"{len(corpus.bad):,} errors" in ran.stdout


def test_on_bad_input_fail_names_the_file_and_the_first_bad_line(ran: Ran) -> None:
    corpus = ran.corpus
    workspace = corpus.workspace
    result = workspace.run(
        "run", corpus.spec, "--set", "sink.uri=fail/", "--set", 'errors.on_bad_input="fail"'
    )
    assert result.returncode == 1, f"{corpus.figures()}\n{result.stdout}\n{result.stderr}"
    first = corpus.bad[0].line
    named = {
        int(n) for n in re.findall(rf"{re.escape(str(corpus.path))} line (\d+)", result.stderr)
    }
    assert first in named, f"{corpus.figures()}: line {first} not named in\n{result.stderr}"
    assert named <= {b.line for b in corpus.bad}, result.stderr
    assert "errors.on_bad_input" in result.stderr
    assert not (workspace.root / "fail" / "_SUCCESS").exists()
    assert not (workspace.root / "fail" / "_staging").exists()


def test_text_in_a_csv_id_column_inside_the_sample_is_one_bad_record(
    workspace: Workspace,
) -> None:
    lines = [b"id,a,b,tag"] + [f"{i},{i / 7!r},0.5,t".encode() for i in range(200)]
    lines[11] = b"id-10,1.0,0.5,t"
    (workspace.root / "ids.csv").write_bytes(b"\n".join(lines) + b"\n")
    (workspace.root / "sentinels.py").write_text(MODEL, encoding="utf-8")
    spec = workspace.spec(
        {
            "source": {"uri": "ids.csv", "id_column": "id"},
            "model": {"kind": "python", "uri": "sentinels.py:Sentinels", "batch_format": "numpy"},
            "run": {"workers": 1},
            "sink": {"uri": "out/", "keep_columns": ["tag"]},
        }
    )
    result = workspace.run("run", spec)
    assert result.returncode == 0, result.stderr
    output = workspace.read_dir(workspace.root / "out", "parquet")
    assert [r["line"] for r in output.errors] == [12]
    assert output.table.column("id").to_pylist() == [i for i in range(200) if i != 10]
