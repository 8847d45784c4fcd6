"""The test set-up (scripts/test.sh and the scripts it runs) does to the machine only what
it needs and says it: apt installs only what is missing and upgrades nothing installed,
a PostgreSQL or Kafka broker the run started is stopped at its end (a trap: on failure
too), and each step that touches the machine is said."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPTS = Path(__file__).parents[2] / "scripts"
SHELL = sorted(SCRIPTS.glob("*.sh"))


@pytest.mark.parametrize("script", SHELL, ids=lambda p: p.name)
def test_apt_installs_only_what_is_missing_and_upgrades_nothing(script: Path) -> None:
    """An install without --no-upgrade upgraded unrelated packages (perl, systemd)."""
    text = script.read_text().replace("\\\n", " ")
    assert not re.search(r"apt(-get)?\s+(-\S+\s+)*(upgrade|dist-upgrade|full-upgrade)", text)
    for install in re.findall(r"apt-get install[^\n]*", text):
        assert "--no-upgrade" in install and "--no-install-recommends" in install, install
        assert re.search(r"echo \"\w+\.sh: installing Debian's", text)  # and says so first


def test_test_sh_stops_the_servers_it_started_even_on_failure() -> None:
    """PostgreSQL and Kafka: each one the run found down is listed before it starts, and
    one EXIT trap, set before either starts, stops every one listed."""
    text = (SCRIPTS / "test.sh").read_text()
    trap = text.index("trap stop_started EXIT")
    assert 'bash "scripts/$service.sh" stop' in text[text.index("stop_started() {") : trap]
    starts = {
        "postgres": 'bash scripts/postgres.sh >"$work/postgres"',  # in the background
        "kafka": 'THRESHER_TEST_KAFKA="$(bash scripts/kafka.sh)"',
    }
    for name, start in starts.items():
        listed = text.index(f'[ "$(bash scripts/{name}.sh status)" = up ] || STARTED+=({name})')
        assert trap < listed < text.index(start)
    # the trap waits for the background job that may be starting PostgreSQL, and stops
    # the others a run that ends early leaves running (each one's pid cleared once waited)
    body = text[text.index("stop_started() {") : trap]
    assert 'wait "$system_pid"' in body
    assert "for pid in ${audit_pid:-} ${mypy_pid:-} ${airflow_pid:-}" in body
    assert 'pkill -P "$pid"' in body and 'kill "$pid"' in body
    assert 'wait "$audit_pid"\naudit=$?\naudit_pid=\n' in text
    assert 'wait "$mypy_pid"\ntypes=$?\nmypy_pid=\n' in text
    assert 'pid="$airflow_pid" airflow_pid=\n  if ! wait "$pid"' in text


def test_test_sh_says_each_step_that_touches_the_machine() -> None:
    text = (SCRIPTS / "test.sh").read_text()
    said = re.findall(r'\bstep "([^"]+)', text)
    steps = ("virtual environment", "installing pip", "PostgreSQL", "Kafka broker", "Chromium",
             "no C compiler", "the suite", "stopping the $service server")  # fmt: skip
    for what in steps:
        assert any(what in line for line in said), (what, said)
    header = text.split("set -euo pipefail")[0]
    assert "What it does to the machine" in header and "Nothing else" in header


def test_kafka_sh_status_changes_nothing_and_a_bad_mode_is_refused(tmp_path: Path) -> None:
    env = {**os.environ, "THRESHER_KAFKA_DIR": str(tmp_path / "k")}
    for mode, code, out in (("status", 0, "down\n"), ("stop", 0, ""), ("restart", 2, "")):
        done = subprocess.run(["bash", SCRIPTS / "kafka.sh", mode], env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert (done.returncode, done.stdout) == (code, out), done.stderr
    assert "unknown mode" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_postgres_sh_status_changes_nothing_and_a_bad_mode_is_refused(tmp_path: Path) -> None:
    env = {**os.environ, "THRESHER_PG_PORT": "1", "THRESHER_PG_DATA": str(tmp_path / "d")}
    status = subprocess.run(["bash", SCRIPTS / "postgres.sh", "status"], env=env,
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert (status.returncode, status.stdout) == (0, "down\n")
    stopped = subprocess.run(["bash", SCRIPTS / "postgres.sh", "stop"], env=env,
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert stopped.returncode == 0  # nothing there to stop: a no-op
    bad = subprocess.run(["bash", SCRIPTS / "postgres.sh", "restart"], env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert bad.returncode == 2 and "unknown mode" in bad.stderr
    assert list(tmp_path.iterdir()) == []
