"""A source and a sink written outside thresher plug in by entry point, pass
`thresher.testing`'s checks, and run jobs: in this process (the coordinator's loop with the
in-process executor) and through the real CLI with worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import thresher
from thresher.plugins import registry
from thresher.spec import SinkSection, SourceSection
from thresher.testing import check_sink, check_source

THRESHER = Path(sys.executable).parent / "thresher"

# A third party's module: a source of the numbers 0..rows-1 and a sink of Arrow IPC
# files, published at finish through thresher's PendingOutput.
PLUGIN = """
from dataclasses import dataclass
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa

from thresher.errors import SinkError
from thresher.plugins import Options, Plugin
from thresher.sinks.parts import StagedPart, read_error_records
from thresher.sinks.publish import PendingOutput, recover, remove_staging
from thresher.sources.base import Chunk, Plan, Shard

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64())])


class RangeOptions(Options):
    rows: int
    per_shard: int = 1000


@dataclass(frozen=True)
class RangeReader:
    columns: tuple

    def read(self, shard, rows_per_chunk):
        for start in range(shard.start, shard.stop, rows_per_chunk):
            ids = np.arange(start, min(start + rows_per_chunk, shard.stop), dtype=np.int64)
            table = pa.table({"id": ids, "x": ids * 0.5}).select(list(self.columns))
            yield Chunk(table, ids)

    def locate(self, shard, position):
        return "row", int(position)


@dataclass(frozen=True)
class RangeSource:
    rows: int
    per_shard: int

    def plan(self):
        starts = range(0, self.rows, self.per_shard)
        shards = [
            Shard(i, "range", lo, min(lo + self.per_shard, self.rows), lo,
                  min(lo + self.per_shard, self.rows) - lo)
            for i, lo in enumerate(starts)
        ]
        return Plan(shards, SCHEMA)

    def reader(self, schema, columns):
        return RangeReader(tuple(columns))


def range_source(section, keep_columns, min_shards):
    options = RangeOptions.model_validate(section.options)
    return RangeSource(options.rows, options.per_shard)


class ArrowWriter:
    def __init__(self, path, shard, attempt):
        self.path, self.shard, self.attempt, self.writer, self.rows = path, shard, attempt, None, 0

    def write(self, table):
        if self.writer is None:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self.writer = pa.ipc.new_file(self.path, table.schema)
        self.writer.write_table(table)
        self.rows += table.num_rows

    def close(self):
        if self.writer is None:
            return StagedPart(self.shard, self.attempt, None, 0)
        self.writer.close()
        return StagedPart(self.shard, self.attempt, self.path, self.rows)


@dataclass(frozen=True)
class ArrowTarget:
    root: str

    def open(self, shard, attempt):
        return ArrowWriter(f"{self.root}/_staging/part-{shard:05d}.{attempt}.arrow", shard, attempt)

    def error_staging(self, shard, attempt):
        return f"{self.root}/_errors/_staging/part-{shard:05d}.{attempt}.jsonl"


@dataclass
class ArrowDirSink:
    root: str
    job_id: str = ""

    def start(self, job_id, shard_count, resume, retry_round=None):
        if retry_round is not None:
            raise SinkError("sink.format: arrowdir keeps no retry rounds")
        self.job_id = job_id
        Path(self.root).mkdir(parents=True, exist_ok=True)
        recover(self.root, skip=job_id)
        remove_staging(fsspec.filesystem("file"), self.root)
        if not resume:
            PendingOutput(self.root, job_id).create()
        return f"{self.root}/_errors"

    def part_target(self):
        return ArrowTarget(self.root)

    def commit(self, output, errors):
        pending = PendingOutput(self.root, self.job_id)
        if output is not None:
            pending.commit(output, f"part-{output.shard:05d}.arrow")
        if errors is not None:
            pending.commit(errors, f"_errors/part-{errors.shard:05d}.jsonl")

    def finish(self, manifest):
        pending = PendingOutput(self.root, self.job_id)
        if not pending.published():
            pending.publish(manifest, overwrite=True)

    def abort(self):
        pass

    def read_output(self):
        for path in sorted(Path(self.root).glob("part-*.arrow")):
            yield pa.ipc.open_file(str(path)).read_all()

    def read_errors(self, shard=None):
        pattern = "part-*.jsonl" if shard is None else f"part-{shard:05d}.jsonl"
        for path in sorted((Path(self.root) / "_errors").glob(pattern)):
            yield from read_error_records(str(path))


def arrow_sink(section):
    return ArrowDirSink(section.uri.rstrip("/"))


PLUGINS = [
    Plugin("source", "range", "acme_thresher:range_source", "acme_thresher:RangeOptions"),
    Plugin("sink", "arrowdir", "acme_thresher:arrow_sink", "thresher.plugins:NoOptions"),
]
"""

MODEL = """
class Half:
    def predict(self, batch):
        return {"half": batch["x"] * 0.5}
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plug-in's module and an installed distribution's metadata declaring it in the
    `thresher.plugins` entry-point group, on the path: installed as pip would."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "acme_thresher.py").write_text(PLUGIN)
    dist = site / "acme_thresher-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-thresher\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[thresher.plugins]\nacme = acme_thresher:PLUGINS\n")
    monkeypatch.syspath_prepend(str(site))
    registry.cache_clear()
    yield site
    registry.cache_clear()
    sys.modules.pop("acme_thresher", None)


def spec(tmp_path: Path, **run: object) -> dict[str, dict[str, object]]:
    (tmp_path / "half.py").write_text(MODEL)
    return {
        "source": {
            "uri": "range://",
            "format": "range",
            "id_column": "id",
            "options": {"rows": 2500, "per_shard": 1000},
        },
        "model": {"kind": "python", "uri": f"{tmp_path / 'half.py'}:Half", "batch_format": "numpy"},
        "run": dict(run),
        "sink": {"uri": str(tmp_path / "out"), "format": "arrowdir"},
    }


def test_the_plugins_pass_the_contract_checks(installed: Path, tmp_path: Path) -> None:
    from acme_thresher import arrow_sink, range_source  # type: ignore[import-not-found]

    section = SourceSection(uri="range://", format="range", options={"rows": 2500})
    assert len(check_source(range_source(section, (), 1)).shards) == 3
    check_sink(lambda: arrow_sink(SinkSection(uri=str(tmp_path / "c"), format="arrowdir")))


def test_a_job_runs_on_them_in_process(installed: Path, tmp_path: Path) -> None:
    result = thresher.run(spec(tmp_path, executor="thresher.testing:in_process_executor"))
    assert result.succeeded, result.problems
    assert (result.manifest["rows_in"], result.manifest["rows_out"]) == (2500, 2500)
    from acme_thresher import ArrowDirSink

    out = pa.concat_tables(ArrowDirSink(str(tmp_path / "out")).read_output())
    assert out.column("id").to_pylist() == list(range(2500))
    assert out.column("half").to_pylist() == [i * 0.25 for i in range(2500)]


def test_their_options_are_checked(installed: Path, tmp_path: Path) -> None:
    bad = spec(tmp_path)
    bad["source"]["options"] = {"rowz": 10}
    with pytest.raises(thresher.SpecError) as caught:
        thresher.parse_spec(bad)
    assert "source.options.rowz: unknown key (did you mean 'rows'?)" in caught.value.problems
    assert "source.options.rows: required" in caught.value.problems


@pytest.mark.e2e
def test_a_job_runs_on_them_through_the_cli(installed: Path, tmp_path: Path) -> None:
    import json

    job = tmp_path / "job.json"
    job.write_text(json.dumps(spec(tmp_path, workers=2)))
    env = {**os.environ, "PYTHONPATH": f"{installed}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run(
        [str(THRESHER), "run", str(job)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    from acme_thresher import ArrowDirSink

    out = pa.concat_tables(ArrowDirSink(str(tmp_path / "out")).read_output())
    assert out.column("id").to_pylist() == list(range(2500))
    assert (tmp_path / "out" / "_SUCCESS").exists()
