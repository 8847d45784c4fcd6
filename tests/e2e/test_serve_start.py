"""What `thresher serve` says as it starts, read from the real command's stderr."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .servers import free_port
from .support import THRESHER

pytestmark = pytest.mark.e2e


def start_lines(args: list[str], until: str, timeout: float = 30.0) -> list[str]:
    """The server's stderr lines up to the one holding `until` (it is then stopped)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    with subprocess.Popen(
        [str(THRESHER), *args, "--port", str(free_port())],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=dict(os.environ),
    ) as process:  # fmt: skip
        try:
            assert process.stderr is not None
            for line in process.stderr:
                lines.append(line.rstrip("\n"))
                if until in line or time.monotonic() > deadline:
                    break
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return lines


def test_a_server_with_no_models_says_so_at_start(tmp_path: Path) -> None:
    """It started without a word, and then refused every job."""
    config = tmp_path / "server.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n', encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'store.db'}"
    lines = start_lines(["--store", store, "serve", "--config", str(config)], "Uvicorn running")
    warned = [line for line in lines if " WARNING " in line and "no models are registered" in line]
    assert len(warned) == 1, "\n".join(lines)
    assert str(config) in warned[0]
    started = next(i for i, line in enumerate(lines) if "Uvicorn running" in line)
    assert lines.index(warned[0]) < started  # said before it serves
