"""The Dockerfile and compose.yaml, checked without a docker daemon: the image runs as a
user of its own with `thresher` as its entrypoint and its extras from a build argument;
every compose service uses host networking; the two replicas share the store and the
data volume but not their port or THRESHER_HOST; the demo's server config is one
thresher accepts. scripts/stack.sh builds and runs the stack for real (docs/deploy.md)."""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from thresher.service.config import read_config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
REPLICAS = ("thresher-a", "thresher-b")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def final_stage(path: Path) -> list[str]:
    """The instructions of a Dockerfile's last stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    last_from = max(i for i, line in enumerate(instructions) if line.startswith("FROM "))
    return instructions[last_from:]


def test_the_image_runs_thresher_as_a_user_of_its_own() -> None:
    stage = final_stage(ROOT / "Dockerfile")
    users = [line.split()[1] for line in stage if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["thresher"]' in stage
    assert not any(re.search(r"\b(gcc|g\+\+|build-essential|clang)\b", s) for s in stage)
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG EXTRAS=", dockerfile, re.M)
    assert re.search(r"^ARG BASE=python:3\.11-slim$", dockerfile, re.M)


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    allowed = (ROOT / ".dockerignore").read_text()
    for dockerfile in (ROOT / "Dockerfile", ROOT / "deploy/compose/postgres.Dockerfile"):
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY ") and "--from=" not in line:
                for source in line.split()[1:-1]:
                    kept = source.rstrip("*").rstrip("/")
                    assert (
                        f"!{kept}" in allowed
                        or f"!{source}" in allowed
                        or any(
                            kept.startswith(rule[1:].rstrip("/"))
                            for rule in allowed.splitlines()
                            if rule.startswith("!")
                        )
                    ), f"{dockerfile.name}: {source} is not in .dockerignore's allowlist"
                    assert "*" in source or (ROOT / kept).exists(), source


def test_every_service_uses_host_networking() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", *REPLICAS}
    for name, service in services.items():
        assert service["network_mode"] == "host", name
        assert "ports" not in service, name  # host networking publishes nothing
        assert service["healthcheck"]["test"][0] == "CMD", name


def test_the_replicas_share_store_and_data_but_not_port_or_host() -> None:
    services = compose()["services"]
    replicas = [services[name] for name in REPLICAS]
    stores = {r["environment"]["THRESHER_STORE"] for r in replicas}
    hosts = {r["environment"]["THRESHER_HOST"] for r in replicas}
    ports = {r["command"][r["command"].index("--port") + 1] for r in replicas}
    assert len(stores) == 1 and stores.pop().startswith("postgresql://")
    assert hosts == set(REPLICAS)
    assert len(ports) == 2
    for replica in replicas:
        assert "thresher-data:/var/lib/thresher" in replica["volumes"]
    assert services["thresher-b"]["depends_on"]["thresher-a"]["condition"] == "service_healthy"
    assert set(compose()["volumes"]) == {"thresher-data", "postgres-data"}


def test_the_demo_config_is_one_thresher_accepts() -> None:
    config = read_config(ROOT / "deploy/compose/server.toml")
    assert str(config.data_dir) == "/var/lib/thresher"
    assert config.models["minilm"].kind == "sentence-transformers"
