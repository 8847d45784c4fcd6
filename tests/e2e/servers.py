"""A real `thresher serve` in a subprocess, for the service's end-to-end tests.

`ServiceSite` lays out a server's folder (config, models, a shared input folder, the
store) and makes tokens with the real CLI; `Server` starts uvicorn on a free port of
127.0.0.1, waits for `/healthz`, and can be stopped politely or killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from .support import THRESHER

# Two small models: `Double` answers at once, `Slow` sleeps per batch (to be caught
# mid-job). Both reject a negative x, so bad rows reach the error file at the predict stage.
MODELS = """
import time

import numpy as np


class Double:
    def predict(self, batch):
        x = np.asarray(batch["x"], dtype=float)
        if (x < 0).any():
            raise ValueError("x must not be negative")
        return {"prediction": 2.0 * x}


class Slow(Double):
    def __init__(self, delay=1.0):
        self.delay = delay

    def predict(self, batch):
        time.sleep(self.delay)
        return super().predict(batch)
"""
FINISHED = ("succeeded", "failed", "cancelled", "held", "rejected")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServiceSite:
    """A server's folder: `server.toml`, `models.py`, `shared/` (the allowed root), the
    store, and `data/` (uploads and outputs)."""

    root: Path
    max_upload_bytes: int = 20_000
    slow_delay: float = 1.0
    settings: str = ""  # more top-level lines of server.toml

    def __post_init__(self) -> None:
        self.shared = self.root / "shared"
        self.shared.mkdir(parents=True, exist_ok=True)
        self.data = self.root / "data"
        self.store = f"sqlite:///{self.root / 'store.db'}"
        self.models = self.root / "models.py"
        self.models.write_text(MODELS, encoding="utf-8")
        self.config = self.root / "server.toml"
        self.config.write_text(
            f"""
data_dir = {json.dumps(str(self.data))}
allowed_roots = [{json.dumps(str(self.shared))}]
max_upload_bytes = {self.max_upload_bytes}
max_concurrent_jobs = 2
{self.settings}

[run]
workers = 1

[models.double]
kind = "python"
uri = {json.dumps(f"{self.models}:Double")}
batch_format = "numpy"

[models.slow]
kind = "python"
uri = {json.dumps(f"{self.models}:Slow")}
batch_format = "numpy"
options = {{ delay = {self.slow_delay} }}
""",
            encoding="utf-8",
        )

    def token(self, tenant: str) -> str:
        """A new token for `tenant`, made by `thresher token create`."""
        done = subprocess.run(
            [str(THRESHER), "--store", self.store, "token", "create", "--tenant", tenant],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()


class Server:
    """`thresher serve` on a free port, its log in the site's folder."""

    def __init__(
        self,
        site: ServiceSite,
        env: dict[str, str] | None = None,
        timeout: float = 30.0,
        args: tuple[str, ...] = (),
    ) -> None:
        self.site = site
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = site.root / f"server-{self.port}.log"
        command = [
            str(THRESHER),
            "serve",
            "--port",
            str(self.port),
            "--config",
            str(site.config),
            "--store",
            site.store,
            *args,
        ]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )
        self._wait_healthy(timeout)

    def _wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the server did not start in {timeout} s:\n{self.log.read_text()}")

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown code runs."""
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class TenantSite:
    """A running server's folder and one tenant's (acme's) client."""

    site: ServiceSite
    acme: httpx.Client


@contextmanager
def one_tenant(folder: Path) -> Iterator[TenantSite]:
    """A server on a new site in `folder`, with acme's client; stopped at the end."""
    site = ServiceSite(folder)
    server = Server(site)
    try:
        with server.client(site.token("acme")) as acme:
            yield TenantSite(site, acme)
    finally:
        server.stop()


def wait_for_job(client: httpx.Client, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """Poll a job until it ends; its last status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in FINISHED:
            return dict(job)
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end in {timeout} s: {job}")


@dataclass(frozen=True)
class Delivery:
    """One POST a webhook receiver got: its path, headers (names lower-cased) and body."""

    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Inbox:
    """A webhook receiver on 127.0.0.1 (`webhook_inbox`): what it got, in order. `bodies`
    is the same as a list of bytes, kept as they come."""

    port: int
    got: list[Delivery] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    ready: threading.Condition = field(default_factory=threading.Condition)

    def url(self, path: str = "/hooks") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait(self, count: int, timeout: float = 120) -> list[Delivery]:
        """The first `count` deliveries, once they have come."""
        with self.ready:
            arrived = self.ready.wait_for(lambda: len(self.got) >= count, timeout)
        assert arrived, f"{len(self.got)} of {count} webhooks arrived"
        return self.got[:count]


@contextmanager
def webhook_inbox(status: int = 200, failing: int = 0) -> Iterator[Inbox]:
    """A receiver on a free port of 127.0.0.1 that answers every POST with `status`, but
    the first `failing`, which get a 503 (a receiver that is down, then comes back)."""
    inbox = Inbox(port=0)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k.lower(): v for k, v in self.headers.items()}
            with inbox.ready:
                inbox.got.append(Delivery(self.path, headers, body))
                inbox.bodies.append(body)
                inbox.ready.notify_all()
                down = len(inbox.got) <= failing
            self.send_response(503 if down else status)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    inbox.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield inbox
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
