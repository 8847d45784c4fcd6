"""Fault tests share one golden run and print their figures at the end."""

from __future__ import annotations

from collections import Counter

import pytest
from harness import FIGURES, make_job


@pytest.fixture(scope="session")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Counter[int], Counter[int]]:
    """Ids in the output and in the error files of one uninterrupted run."""
    job = make_job(tmp_path_factory.mktemp("golden"), "parquet")
    result = job.run()
    assert result.returncode == 0, result.stderr
    ids, errors = job.ids(), job.error_ids()
    assert sum(ids.values()) + sum(errors.values()) == 24_000
    assert errors, "the model should reject a few rows"
    return ids, errors


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("fault injection: kill points and what resume left")
        for line in FIGURES:
            terminalreporter.write_line(line)
