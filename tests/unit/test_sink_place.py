"""What makes a folder thresher's (its own marker, or a manifest only thresher writes;
never a bare `_SUCCESS`), and the guard that keeps every sink — a SQL sink's side folder
and SQLite file too — away from the job store, on real folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thresher.errors import SinkError, SpecError
from thresher.sinks import open_sink
from thresher.sinks.files import check_directory
from thresher.sinks.guard import check_sink_place
from thresher.sinks.publish import written_by_thresher
from thresher.sources.files import filesystem
from thresher.spec import SinkSection


def folder(root: Path, files: dict[str, str]) -> str:
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    return str(root)


def test_only_thresher_s_own_marker_makes_a_folder_thresher_s(tmp_path: Path) -> None:
    fs, _ = filesystem(str(tmp_path))
    manifest = json.dumps({"job_id": "20261201-000000-abcdef", "spec_sha256": "0" * 64})
    cases = {
        "marker": ({"_thresher.json": "{}", "part-00000.parquet": "x"}, True),
        "older thresher": ({"_SUCCESS": manifest, "part-00000.parquet": "x"}, True),
        "spark": ({"_SUCCESS": "", "part-00000-1a.snappy.parquet": "x"}, False),
        "json, not ours": ({"_SUCCESS": "{}", "input.csv": "x"}, False),
    }
    for name, (files, ours) in cases.items():
        root = folder(tmp_path / name.replace(" ", "-"), files)
        assert written_by_thresher(fs, root) is ours, name
        if ours:
            check_directory(fs, root, False, root)
        else:
            with pytest.raises(SinkError, match=r"sink\.force"):
                check_directory(fs, root, False, root)


def test_a_sql_sinks_side_folder_is_checked_as_a_file_sinks_is(tmp_path: Path) -> None:
    side = folder(tmp_path / "mine", {"notes.txt": "someone else's"})
    section = SinkSection(uri=f"sqlite:///{tmp_path / 'out.db'}?table=scores", staging=side)
    with pytest.raises(SinkError, match=r"sink\.staging: .* thresher did not write it"):
        open_sink(section).start("20261201-000000-abcdef", 1, resume=False)
    assert sorted(p.name for p in Path(side).iterdir()) == ["notes.txt"]


def test_a_sqlite_sink_in_the_stores_own_file_is_a_spec_error(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    sink = open_sink(SinkSection(uri=f"sqlite:///{store}?table=thresher_jobs", force=True))
    with pytest.raises(SpecError, match=r"sink\.uri: .* holds the job store"):
        check_sink_place(sink, f"sqlite:///{store}", [])
    elsewhere = open_sink(SinkSection(uri=f"sqlite:///{tmp_path / 'out.db'}?table=t"))
    check_sink_place(elsewhere, f"sqlite:///{store}", [str(tmp_path / "in.parquet")])
