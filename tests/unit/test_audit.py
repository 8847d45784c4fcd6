"""Known-vulnerable dependencies fail the test run (SECURITY.md): `scripts/test.sh` runs
`scripts/audit.py`, which fails on a vulnerability pip-audit knows a fix for, and says so
(exit 3, which `scripts/test.sh` reports as no audit) when no advisory data could be
reached. pip-audit's answer is stood in for here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.unit

SCRIPTS = Path(__file__).parents[2] / "scripts"


def audit_with(monkeypatch: pytest.MonkeyPatch, dependencies: list[dict[str, Any]]) -> ModuleType:
    """scripts/audit.py, with pip-audit answering `dependencies`."""
    spec = importlib.util.spec_from_file_location("audit", SCRIPTS / "audit.py")
    assert spec is not None and spec.loader is not None
    audit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(audit)
    answer = json.dumps({"dependencies": dependencies})

    def pip_audit(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert command[1:3] == ["-m", "pip_audit"]
        return subprocess.CompletedProcess(command, 1, stdout=answer, stderr="")

    monkeypatch.setattr(audit.subprocess, "run", pip_audit)
    return audit


def test_test_sh_runs_the_audit_before_the_tests() -> None:
    """It runs in the background (its advisory data may never answer), and its status is
    read, and a failure stops the run, before the suite starts."""
    lines = (SCRIPTS / "test.sh").read_text().splitlines()
    assert "set -euo pipefail" in lines  # a failed audit stops the run
    audit = lines.index('.venv/bin/python scripts/audit.py >"$work/audit" 2>&1 &')
    read = lines.index('wait "$audit_pid"')
    assert lines[read + 1] == "audit=$?"
    stop = lines.index('[ "$audit" -eq 0 ] || [ "$audit" -eq 3 ] || exit 1')
    assert audit < read < stop < next(i for i, line in enumerate(lines) if "-m pytest -n" in line)


def test_a_vulnerability_with_a_fix_fails_the_audit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vulnerable = {"name": "jinja2", "version": "3.1.2",
                  "vulns": [{"id": "GHSA-h5c8-rqwp-cp95", "fix_versions": ["3.1.3"]}]}  # fmt: skip
    safe = {"name": "numpy", "version": "2.0.0", "vulns": []}
    assert audit_with(monkeypatch, [safe, vulnerable]).main() == 1
    assert "jinja2 3.1.2: GHSA-h5c8-rqwp-cp95 (fixed in 3.1.3)" in capsys.readouterr().out


def test_a_vulnerability_without_a_fix_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    unfixed = {"name": "x", "version": "1", "vulns": [{"id": "PYSEC-1", "fix_versions": []}]}
    clean = {"name": "y", "version": "2", "vulns": []}
    assert audit_with(monkeypatch, [unfixed, clean]).main() == 0


def test_no_advisory_data_is_said_plainly_and_is_no_pass(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was a warning and exit 0: a check of none of 233 packages passed."""
    unreached = [{"name": "numpy", "version": "2.0.0", "skip_reason": "not found on PyPI"}]
    assert audit_with(monkeypatch, unreached).main() == 3
    assert "NOT AUDITED: none of 1 packages could be checked" in capsys.readouterr().err


def test_packages_it_could_not_check_are_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    unlisted = {"name": "private-pkg", "version": "1", "skip_reason": "not found on PyPI"}
    found = [{"name": "numpy", "version": "2.0.0", "vulns": []}, unlisted]
    assert audit_with(monkeypatch, found).main() == 0
    assert "1 packages could not be checked: private-pkg" in capsys.readouterr().out


def test_test_sh_says_plainly_when_the_audit_checked_nothing() -> None:
    """A fixable vulnerability fails the run; an audit that checked nothing is said to
    be none in the run's last lines, and fails the run where THRESHER_AUDIT=required."""
    script = (SCRIPTS / "test.sh").read_text()
    assert '[ "$audit" -eq 0 ] || [ "$audit" -eq 3 ] || exit 1' in script
    ending = script[script.index('if [ "$audit" -eq 3 ]; then') :]
    assert "NOT AUDITED" in ending and '[ "$status" -ne 0 ] || status=3' in ending
    assert 'THRESHER_AUDIT:-}" = required' in ending


def test_pip_audit_that_answers_nothing_readable_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    audit = audit_with(monkeypatch, [])

    def broken(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 2, stdout="", stderr="no pip_audit")

    monkeypatch.setattr(audit.subprocess, "run", broken)
    assert audit.main() == 1
