"""What a tenant's submission may make the server read, and what its failures say.

Submissions are built by the real `build_spec` over a real server config, and planned by
the real `run_job`, in this process: the roots hold for the files the reader opens (a
glob's dot-files, links planted after the submission), and a careless request's failure
message stays small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from thresher.coordinator.job import run_job
from thresher.errors import SourceError, SpecError
from thresher.service.config import ServerConfig, prepare
from thresher.service.errors import Forbidden, Unprocessable
from thresher.service.state import ServiceState
from thresher.service.submission import build_spec
from thresher.spec import ModelSection, parse_spec
from thresher.store import JobState, open_store

MODEL = """
class Doubler:
    def predict(self, batch):
        return {"prediction": batch["x"] * 2}
"""
SECRET = '{"id": 99, "x": 1.0, "password": "hunter2"}\n'


@pytest.fixture
def site(tmp_path: Path) -> ServiceState:
    (tmp_path / "doubler.py").write_text(MODEL)
    model = ModelSection(
        kind="python", uri=f"{tmp_path / 'doubler.py'}:Doubler", batch_format="numpy"
    )
    (tmp_path / "shared").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.jsonl").write_text(SECRET)
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            models={"double": model},
            allowed_roots=[str(tmp_path / "shared")],
            run={"workers": 1},
        )
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    return ServiceState(store=store, config=config, data_dir=config.data_dir)


def rows(n: int, start: int = 0) -> str:
    return "".join(json.dumps({"id": i, "x": float(i)}) + "\n" for i in range(start, start + n))


def body(uri: Path | str, **extra: object) -> dict[str, object]:
    return {"source": {"uri": str(uri), "format": "jsonl"}, "model": "double", **extra}


def test_a_glob_does_not_reach_a_hidden_link_out_of_the_root(site: ServiceState) -> None:
    shared = Path(site.config.allowed_roots[0])
    (shared / "a.jsonl").write_text(rows(3))
    (shared / ".x.jsonl").symlink_to(shared.parent / "outside" / "secret.jsonl")
    with pytest.raises(Forbidden, match="outside the paths this job may read"):
        build_spec(site, "acme", body(shared / "*.jsonl", id_column="id"), "job-1")


def test_a_link_planted_after_the_submission_is_refused_when_the_job_plans(
    site: ServiceState, tmp_path: Path
) -> None:
    nightly = Path(site.config.allowed_roots[0]) / "nightly"
    nightly.mkdir()
    (nightly / "a.jsonl").write_text(rows(3))
    spec = build_spec(site, "acme", body(nightly, id_column="id"), "job-1")
    (nightly / "b.jsonl").symlink_to(tmp_path / "outside" / "secret.jsonl")  # after the 201
    with pytest.raises(SourceError, match="is outside the paths this job may read"):
        run_job(spec, site.store)
    written = [p.read_text() for p in site.data_dir.rglob("*") if p.is_file()]
    assert not any("hunter2" in text for text in written)


def test_the_plan_holds_the_real_paths_of_the_files_it_reads(site: ServiceState) -> None:
    shared = Path(site.config.allowed_roots[0])
    (shared / "real").mkdir()
    (shared / "real" / "a.jsonl").write_text(rows(3))
    (shared / "link").mkdir()
    (shared / "link" / "a.jsonl").symlink_to(shared / "real" / "a.jsonl")  # inside: allowed
    spec = build_spec(site, "acme", body(shared / "link", id_column="id"), "job-1")
    result = run_job(spec, site.store)
    assert result.succeeded, result.problems
    plan = site.store.job(result.job_id).plan
    assert [s["path"] for s in plan["shards"]] == [str((shared / "real" / "a.jsonl").resolve())]


def test_many_missing_columns_make_a_short_message(site: ServiceState) -> None:
    """A 2,000-column header and 2,000 missing columns once made a 44 MB message (one
    line per column, each repeating the header), stored and returned by every listing."""
    shared = Path(site.config.allowed_roots[0])
    header = [f"column_with_a_long_name_{i}" for i in range(2000)]
    (shared / "wide.csv").write_text(",".join(header) + "\n" + ",".join("1" * 2000) + "\n")
    missing = [f"no_such_column_{i}" for i in range(2000)]
    request = {"source": {"uri": str(shared / "wide.csv")}, "model": "double", "columns": missing}
    with pytest.raises(Unprocessable) as refused:  # at submission: 422, nothing queued
        build_spec(site, "acme", request, "job-1")
    (problem,) = refused.value.detail
    assert problem.startswith("columns: no 2,000 columns, e.g. 'no_such_column_0'"), problem
    assert "the input has 2,000 columns: 'column_with_a_long_name_0'" in problem
    assert len(problem) < 500, problem
    raw = {
        "model": site.config.models["double"].model_dump(mode="json"),
        "source": {"uri": str(shared / "wide.csv"), "columns": missing},
        "sink": {"uri": str(site.data_dir / "out/")},
    }
    with pytest.raises(SpecError) as failed:  # and the planner says as little
        run_job(parse_spec(raw), site.store)
    assert len(str(failed.value)) < 500, str(failed.value)


def test_a_submission_names_the_first_missing_fields(site: ServiceState) -> None:
    shared = Path(site.config.allowed_roots[0])
    (shared / "in.jsonl").write_text(rows(2))
    request = body(shared / "in.jsonl", id_column="key", keep_columns=["x", "region"])
    with pytest.raises(Unprocessable) as refused:
        build_spec(site, "acme", request, "job-1")
    assert refused.value.detail == [
        "id_column: no column 'key' (the input has 2 columns: 'id', 'x')",
        "keep_columns: no column 'region' (the input has 2 columns: 'id', 'x')",
    ]


def test_a_long_message_is_stored_cut_short(site: ServiceState, job_spec: Any) -> None:
    site.store.queue_job("job-1", job_spec())
    site.store.finish("job-1", JobState.FAILED, None, "x" * 1_000_000)
    message = site.store.job("job-1").message or ""
    assert len(message) < 4100 and message.endswith("(996,000 more characters)")


def test_unprocessable_lists_twenty_problems_and_a_count() -> None:
    error = Unprocessable([f"columns.{i}: bad" for i in range(2000)])
    assert len(error.detail) == 21 and error.detail[-1] == "… and 1,980 more problems"
