"""The test set-up (scripts/test.sh and the scripts it runs) does to the machine only what
it needs and says it: apt installs only what is missing and upgrades nothing installed,
a PostgreSQL the run started is stopped at its end (a trap: on failure too), and each
step that touches the machine is said."""

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


def test_test_sh_stops_the_postgresql_it_started_even_on_failure() -> None:
    text = (SCRIPTS / "test.sh").read_text()
    status = text.index('"$(bash scripts/postgres.sh status)" = down')
    trap = text.index("trap '", status)
    assert "bash scripts/postgres.sh stop' EXIT" in text[trap : text.index("\n", trap)]
    assert trap < text.index('THRESHER_TEST_POSTGRES="$(bash scripts/postgres.sh)"')


def test_test_sh_says_each_step_that_touches_the_machine() -> None:
    text = (SCRIPTS / "test.sh").read_text()
    said = re.findall(r'\bstep "([^"]+)', text)
    for what in ("virtual environment", "installing pip", "PostgreSQL", "Chromium",
                 "no C compiler", "the suite", "stopping the PostgreSQL"):  # fmt: skip
        assert any(what in line for line in said), (what, said)
    header = text.split("set -euo pipefail")[0]
    assert "What it does to the machine" in header and "Nothing else" in header


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
