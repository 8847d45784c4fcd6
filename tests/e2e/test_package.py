"""The package as pip installs it: the wheel built from this tree by pip (hatchling, in
pip's isolated build environment), read as an installer reads it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
# Only the tests use these; an extra a user installs must not pull them in.
TEST_ONLY = {"httpx", "pytest", "hypothesis", "schemathesis", "moto", "openai"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        check=True,
    )
    (built,) = out.glob("thresher-*.whl")
    return zipfile.ZipFile(built)


def metadata(wheel: zipfile.ZipFile) -> dict[str, list[str]]:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    message = Parser().parsestr(wheel.read(name).decode("utf-8"))
    return {key: message.get_all(key) or [] for key in set(message.keys())}


def test_the_wheel_ships_py_typed_and_the_license(wheel: zipfile.ZipFile) -> None:
    """Without py.typed a user's type checker ignores thresher's annotations."""
    names = wheel.namelist()
    assert "thresher/py.typed" in names
    (license_file,) = [n for n in names if re.search(r"\.dist-info/licenses/LICENSE$", n)]
    assert "Apache License" in wheel.read(license_file).decode("utf-8")
    assert metadata(wheel)["License-Expression"] == ["Apache-2.0"]


def test_the_classifiers_state_what_requires_python_allows(wheel: zipfile.ZipFile) -> None:
    found = metadata(wheel)
    (requires,) = found["Requires-Python"]
    assert requires.replace(" ", "") in (">=3.11,<3.14", "<3.14,>=3.11")
    versions = [c.rsplit(":: ", 1)[1] for c in found["Classifier"]
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]  # fmt: skip
    assert versions == ["3.11", "3.12", "3.13"]
    assert "Operating System :: POSIX :: Linux" in found["Classifier"]
    assert "Typing :: Typed" in found["Classifier"]
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in versions  # this run's


def test_published_extras_have_floors_not_pins_and_no_test_tools(
    wheel: zipfile.ZipFile,
) -> None:
    """`torch==2.13.0` in `[torch]` replaced a user's own torch build; httpx, only the
    tests' client, came with `[service]`."""
    requirements = metadata(wheel)["Requires-Dist"]
    for requirement in requirements:
        assert "==" not in requirement.split(";")[0], requirement  # the version, not the marker
    runtime = [r for r in requirements if "extra == 'test'" not in r and 'extra == "test"' not in r]
    names = {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in runtime}
    assert names.isdisjoint(TEST_ONLY), names & TEST_ONLY


def test_the_cpu_torch_pin_is_the_test_set_ups_alone() -> None:
    pins = (ROOT / "scripts" / "constraints-cpu.txt").read_text(encoding="utf-8")
    assert re.search(r"^torch==[\d.]+\+cpu$", pins, re.M)
    assert "-c scripts/constraints-cpu.txt" in (ROOT / "scripts" / "test.sh").read_text()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(r.startswith("torch>=") for r in extras["optional-dependencies"]["torch"])
