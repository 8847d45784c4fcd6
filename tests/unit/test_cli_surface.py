"""The command line's own surface, as a newcomer meets it: every command's `--help` works
with nothing else given, `thresher --version` says which thresher this is, and a job whose
input is not there is refused as a bad spec is (exit 2), before any work."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from thresher.cli import cli

pytestmark = pytest.mark.unit


def _paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command's words below `group`, groups included, found by walking the tree (so
    a command added later is walked too)."""
    found: list[tuple[str, ...]] = []
    for name, command in sorted(group.commands.items()):
        path = (*prefix, name)
        found.append(path)
        if isinstance(command, click.Group):
            found.extend(_paths(command, path))
    return found


COMMANDS = _paths(cli)


def test_the_walk_finds_the_nested_commands() -> None:
    assert ("schedules", "pause") in COMMANDS and ("triggers", "reset") in COMMANDS
    assert len(COMMANDS) > 20


@pytest.mark.parametrize("words", [(), *COMMANDS], ids=lambda w: " ".join(w) or "thresher")
def test_help_needs_no_other_option(words: tuple[str, ...], tmp_path: Path) -> None:
    """`thresher schedules pause --help` printed "Missing option '--config'" and exit 2:
    help must come before what the command (or its group) needs to run."""
    result = CliRunner().invoke(
        cli,
        [*words, "--help"],
        prog_name="thresher",
        env={"THRESHER_STORE": f"sqlite:///{tmp_path / 's.db'}"},
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: thresher {' '.join(words)}".rstrip()), result.output
    assert not (tmp_path / "s.db").exists()  # help opens no store


def test_version_is_the_installed_distributions() -> None:
    result = CliRunner().invoke(cli, ["--version"], prog_name="thresher")
    assert result.exit_code == 0
    assert result.output.strip() == f"thresher, version {version('thresher')}"


def test_a_schedule_command_without_its_config_is_still_refused(tmp_path: Path) -> None:
    """Help no longer needs --config; pausing still does, and says so (exit 2)."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    for words in (["schedules"], ["schedules", "pause", "nightly"]):
        result = CliRunner().invoke(cli, ["--store", store, *words], prog_name="thresher")
        assert result.exit_code == 2, result.output
        assert "--config" in result.output
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("command", ["run", "tune"])
def test_a_missing_input_is_exit_2_before_any_work(command: str, tmp_path: Path) -> None:
    """It was exit 1, "job failed", as if the job had run; `thresher validate` said 2."""
    (tmp_path / "model.py").write_text(
        "class Model:\n    def predict(self, batch):\n        return {'p': [0] * len(batch)}\n",
        encoding="utf-8",
    )
    spec = tmp_path / "job.toml"
    spec.write_text(
        '[source]\nuri = "nothere.parquet"\n[model]\nkind = "python"\nuri = "model.py:Model"\n'
        '[sink]\nuri = "out/"\n',
        encoding="utf-8",
    )
    store = f"sqlite:///{tmp_path / 's.db'}"
    result = CliRunner().invoke(cli, ["--store", store, command, str(spec)], prog_name="thresher")
    assert result.exit_code == 2, result.output
    assert "source.uri: no input files at" in result.output
    assert not (tmp_path / "out").exists()
    listed = CliRunner().invoke(cli, ["--store", store, "status", "--json"])
    assert listed.exit_code == 0 and json.loads(listed.output) == []  # no job was recorded
