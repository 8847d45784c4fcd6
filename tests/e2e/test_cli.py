"""The `thresher` command as a user meets it: help, refusals, overrides, output modes,
bad input, failing models, and the demo. Every run is the real console script."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from .support import FAST, FEATURES, ID, KEEP, Workspace, csv_bytes, make_table, read_json

pytestmark = pytest.mark.e2e

ROWS = 2000

# Light python models: workers start faster without scikit-learn, and each one's
# behaviour is plain to see.
MODELS = """
import numpy as np


class Doubler:
    def predict(self, batch):
        return {"prediction": 2.0 * batch["f0"].to_numpy(), "batch_rows": [len(batch)] * len(batch)}


# A library in the model made a semaphore (as tqdm does): workers must not leak it.
class HoldsASemaphore(Doubler):
    def __init__(self):
        import multiprocessing

        self.lock = multiprocessing.get_context("spawn").Lock()


class RejectsVeryNegative:
    def predict(self, batch):
        if (batch["f3"] < -2.0).any():
            raise ValueError("f3 below -2 is out of range")
        return {"prediction": 2.0 * batch["f0"]}


# Rejects f3 below -1 until a file named `fixed` stands beside this module.
class RejectsUntilFixed:
    def predict(self, batch):
        fixed = __import__("pathlib").Path(__file__).with_name("fixed").exists()
        if not fixed and (batch["f3"] < -1.0).any():
            raise ValueError("f3 below -1 is out of range")
        rows = len(batch["f0"])
        return {"prediction": 2.0 * batch["f0"], "batch_rows": [rows] * rows}


class DropsOne:
    def predict(self, batch):
        return {"prediction": np.zeros(len(batch["f0"]) - 1)}


class NoWeights:
    def setup(self):
        raise FileNotFoundError("weights.bin is not there")

    def predict(self, batch):
        return {"prediction": batch["f0"]}
"""


def spec_for(workspace: Workspace, input_file: Path, model_class: str, **extra: Any) -> Path:
    (workspace.root / "user_model.py").write_text(MODELS, encoding="utf-8")
    spec: dict[str, dict[str, Any]] = {
        "source": {"uri": input_file.name, "id_column": ID, "shard_bytes": 4096},
        "model": {"kind": "python", "uri": f"user_model.py:{model_class}"},
        "sink": {"uri": "out/", "keep_columns": [KEEP]},
    }
    for section, values in extra.items():
        spec.setdefault(section, {}).update(values)
    return workspace.spec(spec)


def job_id(stdout: str) -> str:
    found = re.search(r"^job (\S+) succeeded", stdout, re.MULTILINE)
    assert found, stdout
    return found[1]


# Help.


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--help"], ["batch inference", "run", "demo"]),
        (["run", "--help"], ["Run the job that SPEC_FILE", "--set"]),
        (["demo", "--help"], ["synthetic", "--rows", "--dir"]),
    ],
)
def test_help_says_what_each_command_is_for(
    args: list[str], says: list[str], workspace: Workspace
) -> None:
    result = workspace.run(*args)
    assert result.returncode == 0, result.stderr
    for words in says:
        assert words in result.stdout


# Refusals before any work starts.


def test_bad_spec_exits_2_with_one_line_per_problem(workspace: Workspace) -> None:
    workspace.write_input(make_table(50), "parquet")
    spec = workspace.spec(
        {
            "source": {"uri": "customers.parquet", "id_colum": ID},
            "model": {"kind": "sklearn"},
            "sink": {"uri": "out/", "mode": "replace"},
        }
    )
    result = workspace.run("run", spec)
    assert result.returncode == 2
    lines = [line.strip() for line in result.stderr.splitlines()]
    assert any(line.startswith("source.id_colum: unknown key") for line in lines), lines
    assert any(line.startswith("sink.mode: must be one of") for line in lines), lines
    assert any(line.startswith("model.uri: required") for line in lines), lines
    assert "Traceback" not in result.stderr
    assert not (workspace.root / "out").exists()


def test_a_column_not_in_the_input_exits_2_naming_source_columns(workspace: Workspace) -> None:
    source = workspace.write_input(make_table(50), "parquet")
    spec = spec_for(workspace, source, "Doubler", source={"columns": ["f0", "no_such_column"]})
    result = workspace.run("run", spec)
    assert result.returncode == 2
    assert re.search(r"source\.columns: .*no_such_column", result.stderr), result.stderr
    assert not (workspace.root / "out").exists()


def test_a_missing_model_file_exits_2_before_touching_the_output(workspace: Workspace) -> None:
    source = workspace.write_input(make_table(50), "parquet")
    spec = workspace.spec(
        {
            "source": {"uri": source.name, "id_column": ID},
            "model": {"kind": "sklearn", "uri": "nowhere/model.skops"},
            "sink": {"uri": "out/", "keep_columns": [KEEP]},
        }
    )
    earlier = workspace.root / "out" / "part-00000.parquet"
    earlier.parent.mkdir()
    earlier.write_bytes(b"an earlier job's results")
    (workspace.root / "out" / "_SUCCESS").write_text("{}")
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 2
    assert f"model.uri: {workspace.root}/nowhere/model.skops is not a file" in result.stderr
    assert "Traceback" not in result.stderr
    assert earlier.read_bytes() == b"an earlier job's results"  # overwrite never started


def test_a_misspelt_option_of_a_python_model_exits_2(workspace: Workspace) -> None:
    """The class's arguments are read from its source before any work starts."""
    source = workspace.write_input(make_table(50), "parquet")
    spec = spec_for(workspace, source, "HoldsASemaphore", model={"options": {"lock": 1}})
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 2, result.stderr
    assert (
        "model.options.lock: unknown key (check the spelling); HoldsASemaphore takes no options"
        in result.stderr
    )
    assert not (workspace.root / "out").exists()


# A plain run, looked at from several sides.


@dataclass(frozen=True)
class Ran:
    workspace: Workspace
    table: pa.Table
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """One run whose spec says batch.size = 4096 and whose --set says 100."""
    workspace = Workspace(tmp_path_factory.mktemp("plain"))
    table = make_table(ROWS)
    source = workspace.write_input(table, "parquet")
    spec = spec_for(workspace, source, "Doubler", batch={"size": 4096})
    result = workspace.run("run", spec, *FAST, "--set", "batch.size=100")
    assert result.returncode == 0, result.stderr
    return Ran(workspace, table, result.stdout, result.stderr)


def test_tune_prints_the_sweep_and_a_recommendation(plain_run: Ran) -> None:
    workspace = plain_run.workspace
    result = workspace.run("tune", workspace.root / "job.toml", "--sizes", "16,64")
    assert result.returncode == 0, result.stderr
    assert "rows/s" in result.stdout and "latency" in result.stdout
    sizes = re.findall(r"^\W*(\d[\d,]*)\s", result.stdout, re.MULTILINE)
    assert sizes == ["16", "64"], result.stdout
    assert re.search(r"recommended: batch.size = (16|64) \(", result.stdout)
    assert "measured as the job runs: " in result.stdout  # with its threads


def test_set_batch_size_takes_effect(plain_run: Ran) -> None:
    output = plain_run.workspace.read_dir(plain_run.workspace.root / "out", "parquet")
    assert output.manifest is not None
    assert output.manifest["batch_size"] == 100
    assert set(output.table.column("batch_rows").to_pylist()) == {100}  # what the model saw
    assert output.table.column(ID).to_pylist() == plain_run.table.column(ID).to_pylist()
    np.testing.assert_array_equal(
        output.table.column("prediction").to_numpy(), 2.0 * plain_run.table.column("f0").to_numpy()
    )


def test_one_row_group_gives_each_worker_a_row_range(workspace: Workspace) -> None:
    """10,000 rows in one row group is one shard by size (64 MB): planning cuts it into a
    row range per worker, and the output still holds every row once, in input order."""
    import pyarrow.parquet as pq

    table = make_table(10_000, seed=3)
    pq.write_table(table, workspace.root / "one.parquet")  # a single row group
    spec = spec_for(workspace, workspace.root / "one.parquet", "Doubler")
    spec.write_text(spec.read_text().replace("shard_bytes = 4096\n", ""), encoding="utf-8")
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 0, result.stderr
    assert re.search(r"2 shard\(s\), 10,000 rows, 2 worker\(s\) x 1 thread", result.stderr)
    output = workspace.read_dir(workspace.root / "out", "parquet")
    assert len(list((workspace.root / "out").glob("part-*.parquet"))) == 2
    assert output.table.column(ID).to_pylist() == table.column(ID).to_pylist()
    np.testing.assert_array_equal(
        output.table.column("prediction").to_numpy(), 2.0 * table.column("f0").to_numpy()
    )


def test_workers_leave_no_semaphore_behind(workspace: Workspace) -> None:
    """Workers skip the interpreter's teardown when they are done (torch's takes a second
    or more), but not multiprocessing's exit steps: a semaphore the model made is still
    unlinked, and the resource tracker has nothing to warn about."""
    table = make_table(ROWS)
    spec = spec_for(workspace, workspace.write_input(table, "parquet"), "HoldsASemaphore")
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 0, result.stderr
    assert "leaked semaphore" not in result.stderr and "resource_tracker" not in result.stderr
    output = workspace.read_dir(workspace.root / "out", "parquet")
    assert output.table.column(ID).to_pylist() == table.column(ID).to_pylist()


def test_plain_log_lines_when_not_a_terminal(plain_run: Ran) -> None:
    assert re.search(r"^\d\d:\d\d:\d\d thresher: job \S+: \d+ shard", plain_run.stderr, re.M)
    assert "\x1b[" not in plain_run.stderr + plain_run.stdout  # no terminal control codes
    printed = re.search(r"output: (\S+)", plain_run.stdout)
    assert printed, plain_run.stdout
    root = plain_run.workspace.root
    assert (root / printed[1]).resolve() == (root / "out").resolve()


# Output modes and foreign directories.


def test_append_keeps_both_runs_and_overwrite_replaces_them(workspace: Workspace) -> None:
    table = make_table(ROWS)
    source = workspace.write_input(table, "parquet")
    spec = spec_for(workspace, source, "Doubler")
    out = workspace.root / "out"
    ids = table.column(ID).to_pylist()

    first = workspace.run("run", spec, *FAST)
    assert first.returncode == 0, first.stderr
    assert len(list(out.glob("part-*.parquet"))) == 5  # 400-row row groups, one per shard

    second = workspace.run("run", spec, *FAST, "--set", "sink.mode=append")
    assert second.returncode == 0, second.stderr
    appended = workspace.read_dir(out, "parquet")
    assert sorted(appended.table.column(ID).to_pylist()) == sorted(ids + ids)
    assert len(list(out.glob(f"part-{job_id(second.stdout)}-*.parquet"))) == 5
    assert appended.manifest is not None
    assert appended.manifest["job_id"] == job_id(second.stdout)

    third = workspace.run("run", spec, *FAST, "--set", "source.shard_bytes=100000000")
    assert third.returncode == 0, third.stderr
    assert [p.name for p in out.glob("part-*")] == ["part-00000.parquet"]
    replaced = workspace.read_dir(out, "parquet")
    assert replaced.table.column(ID).to_pylist() == ids
    assert replaced.manifest is not None
    assert replaced.manifest["job_id"] == job_id(third.stdout)


def test_a_directory_thresher_did_not_write_is_refused_unless_forced(
    workspace: Workspace,
) -> None:
    source = workspace.write_input(make_table(ROWS), "parquet")
    spec = spec_for(workspace, source, "Doubler")
    out = workspace.root / "out"
    out.mkdir()
    (out / "notes.txt").write_text("someone else's file", encoding="utf-8")

    refused = workspace.run("run", spec, *FAST)
    assert refused.returncode == 1
    assert "sink.force" in refused.stderr
    assert [p.name for p in out.iterdir()] == ["notes.txt"]  # nothing touched

    forced = workspace.run("run", spec, *FAST, "--set", "sink.force=true")
    assert forced.returncode == 0, forced.stderr
    assert workspace.read_dir(out, "parquet").table.num_rows == ROWS


def test_a_sink_that_is_a_file_fails_with_a_message_and_the_job_ends(
    workspace: Workspace,
) -> None:
    """It once gave a traceback and left the recorded job `running` forever."""
    source = workspace.write_input(make_table(ROWS), "parquet")
    spec = spec_for(workspace, source, "Doubler")
    (workspace.root / "out").write_text("a file, not a folder", encoding="utf-8")

    refused = workspace.run("run", spec, *FAST)
    assert refused.returncode == 1
    assert "sink.uri:" in refused.stderr and "is a file" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert (workspace.root / "out").read_text(encoding="utf-8") == "a file, not a folder"
    status = workspace.run("status")
    assert "failed" in status.stdout and "running" not in status.stdout, status.stdout


# Bad input.


@dataclass(frozen=True)
class BadCsv:
    workspace: Workspace
    spec: Path
    csv: Path
    good: pa.Table  # the rows of the good lines, in file order
    bad_lines: list[int]  # 1-based


@pytest.fixture(scope="module")
def bad_csv(tmp_path_factory: pytest.TempPathFactory) -> BadCsv:
    """A CSV whose header is line 1 and whose row i is line i + 2, with three bad lines
    in different shards."""
    workspace = Workspace(tmp_path_factory.mktemp("badcsv"))
    table = make_table(ROWS)
    lines = csv_bytes(table).split(b"\n")
    broken = {12: b"1,2,3"}  # wrong column count
    fields = lines[776].split(b",")
    fields[1 + FEATURES.index("f2")] = b"not-a-number"
    broken[777] = b",".join(fields)
    fields = lines[1554].split(b",")
    fields[-1] = b"caf\xe9"  # the keep column, not valid UTF-8
    broken[1555] = b",".join(fields)
    for number, raw in broken.items():
        lines[number - 1] = raw
    csv = workspace.root / "customers.csv"
    csv.write_bytes(b"\n".join(lines))
    good = [i for i in range(ROWS) if i + 2 not in broken]
    spec = spec_for(workspace, csv, "Doubler", source={"shard_bytes": 32768})
    return BadCsv(workspace, spec, csv, table.take(good), sorted(broken))


def test_bad_csv_lines_go_to_errors_with_line_numbers(bad_csv: BadCsv) -> None:
    workspace = bad_csv.workspace
    result = workspace.run("run", bad_csv.spec, *FAST, "--set", "sink.uri=skip/")
    assert result.returncode == 0, result.stderr
    output = workspace.read_dir(workspace.root / "skip", "parquet")

    by_line = {record["line"]: record for record in output.errors}
    assert sorted(by_line) == bad_csv.bad_lines
    for record in output.errors:
        assert record["stage"] == "decode"
        assert record["source"] == str(bad_csv.csv)
    assert "columns" in by_line[12]["message"]
    assert "'f2'" in by_line[777]["message"]
    assert by_line[1555]["error"] == "UnicodeDecodeError"

    assert output.table.column(ID).to_pylist() == bad_csv.good.column(ID).to_pylist()
    np.testing.assert_array_equal(
        output.table.column("prediction").to_numpy(), 2.0 * bad_csv.good.column("f0").to_numpy()
    )
    manifest = output.manifest
    assert manifest is not None
    assert manifest["rows_error"] == len(bad_csv.bad_lines)
    assert manifest["rows_out"] == bad_csv.good.num_rows
    assert manifest["rows_in"] == manifest["rows_out"] + manifest["rows_error"] == ROWS


def test_on_bad_input_fail_stops_naming_file_and_line(bad_csv: BadCsv) -> None:
    workspace = bad_csv.workspace
    result = workspace.run(
        "run", bad_csv.spec, *FAST, "--set", "sink.uri=fail/", "--set", 'errors.on_bad_input="fail"'
    )
    assert result.returncode == 1
    named = {
        int(n) for n in re.findall(rf"{re.escape(str(bad_csv.csv))} line (\d+)", result.stderr)
    }
    assert named, result.stderr
    assert named <= set(bad_csv.bad_lines)
    assert not (workspace.root / "fail" / "_SUCCESS").exists()
    assert not (workspace.root / "fail" / "_staging").exists()


def test_max_error_rate_exceeded_fails_without_success(bad_csv: BadCsv) -> None:
    workspace = bad_csv.workspace
    result = workspace.run(
        "run",
        bad_csv.spec,
        *FAST,
        "--set",
        "sink.uri=rate/",
        "--set",
        "errors.max_error_rate=0.001",
    )
    assert result.returncode == 1
    assert "errors.max_error_rate" in result.stderr
    assert not (workspace.root / "rate" / "_SUCCESS").exists()
    assert not (workspace.root / "rate" / "_staging").exists()


# Models that misbehave.


def test_rows_the_model_rejects_go_to_errors_alone(workspace: Workspace) -> None:
    table = make_table(ROWS)
    source = workspace.write_input(table, "parquet")
    spec = spec_for(workspace, source, "RejectsVeryNegative", model={"batch_format": "numpy"})
    result = workspace.run("run", spec, *FAST, "--set", "batch.size=128")
    assert result.returncode == 0, result.stderr
    output = workspace.read_dir(workspace.root / "out", "parquet")

    rejected = np.flatnonzero(table.column("f3").to_numpy() < -2.0)
    assert 10 < len(rejected) < 100  # a few, spread over the shards
    ids = table.column(ID).to_numpy()
    assert sorted(r["id"] for r in output.errors) == sorted(ids[rejected].tolist())
    assert sorted(r["row"] for r in output.errors) == rejected.tolist()
    for record in output.errors:
        assert (record["stage"], record["error"]) == ("predict", "ValueError")
        assert "f3 below -2" in record["message"]
    accepted = table.take(np.setdiff1d(np.arange(ROWS), rejected))
    assert output.table.column(ID).to_pylist() == accepted.column(ID).to_pylist()
    np.testing.assert_array_equal(
        output.table.column("prediction").to_numpy(), 2.0 * accepted.column("f0").to_numpy()
    )
    assert output.manifest is not None
    assert output.manifest["rows_error"] == len(rejected)


def test_retry_errors_predicts_the_fixed_rows_once_in_batches_of_batch_size(
    workspace: Workspace,
) -> None:
    table = make_table(ROWS)
    source = workspace.write_input(table, "parquet")
    spec = spec_for(workspace, source, "RejectsUntilFixed", model={"batch_format": "numpy"})
    first = workspace.run("run", spec, *FAST, "--set", "batch.size=8")
    assert first.returncode == 0, first.stderr
    rejected = np.flatnonzero(table.column("f3").to_numpy() < -1.0)
    assert len(rejected) > 100  # many to a shard: more than one batch each
    (workspace.root / "fixed").touch()
    retry = workspace.run("retry-errors", job_id(first.stdout))
    assert retry.returncode == 0, retry.stderr
    output = workspace.read_dir(workspace.root / "out", "parquet")
    assert sorted(output.table.column(ID).to_pylist()) == sorted(table.column(ID).to_pylist())
    assert output.errors == []
    retried = output.table.filter(pa.compute.is_in(output.table[ID], table[ID].take(rejected)))
    assert max(retried.column("batch_rows").to_pylist()) <= 8  # as the job's workers batch


def test_a_model_returning_the_wrong_number_of_rows_fails_the_job(workspace: Workspace) -> None:
    source = workspace.write_input(make_table(ROWS), "parquet")
    spec = spec_for(workspace, source, "DropsOne")
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 1
    assert "user_model.py:DropsOne" in result.stderr
    assert re.search(r"returned \d+ values .* batch has \d+ rows", result.stderr), result.stderr
    assert not (workspace.root / "out" / "_SUCCESS").exists()


def test_a_model_that_cannot_load_fails_naming_the_stage(workspace: Workspace) -> None:
    source = workspace.write_input(make_table(ROWS), "parquet")
    result = workspace.run("run", spec_for(workspace, source, "NoWeights"), *FAST)
    assert result.returncode == 1
    assert "job failed (stage load): a worker could not start" in result.stderr, result.stderr
    assert "weights.bin is not there" in result.stderr


# The demo.


def test_demo_runs_end_to_end_and_says_where_results_are(workspace: Workspace) -> None:
    result = workspace.run("demo", "--rows", "20000", "--dir", "tmp")
    assert result.returncode == 0, result.stderr
    assert "succeeded" in result.stdout
    printed = re.search(r"output: (\S+)", result.stdout)
    assert printed, result.stdout
    scores = workspace.root / "tmp" / "scores"
    assert (workspace.root / printed[1]).resolve() == scores.resolve()
    manifest = read_json(scores / "_SUCCESS")
    assert manifest is not None
    assert manifest["rows_out"] == 20000
