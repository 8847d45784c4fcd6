"""Webhook receivers that misbehave on purpose, for the unit and end-to-end tests of the
webhook sender's deadlines (on 127.0.0.1 only, bounded in time).

`drip_receiver` answers each connection with `HTTP/1.1 200 OK…` one byte at a time, so no
single read the sender makes waits long, yet the answer never ends: only a deadline on
the whole attempt cuts it off."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Drip:
    """What the dripping receiver saw: connections opened, each one's request path, and,
    for those the sender hung up on, how long they lasted."""

    port: int = 0
    opened: int = 0
    paths: list[str] = field(default_factory=list)
    closed: list[float] = field(default_factory=list)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def count(self, path: str) -> int:
        return self.paths.count(path)


@contextmanager
def drip_receiver(interval: float, lasts: float) -> Iterator[Drip]:
    """A raw socket server on 127.0.0.1 that reads each request's head, then drips its
    answer one byte every `interval` seconds for at most `lasts` seconds a connection."""
    drip, stop = Drip(), threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    drip.port = listener.getsockname()[1]

    def serve(conn: socket.socket) -> None:
        started = time.monotonic()
        with conn:
            conn.settimeout(5)
            head = conn.recv(65536).split(b" ", 2)
            drip.paths.append(head[1].decode() if len(head) > 1 else "")
            for byte in b"HTTP/1.1 200 OK\r\n" * 100:
                if stop.wait(interval) or time.monotonic() - started > lasts:
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    drip.closed.append(time.monotonic() - started)
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            drip.opened += 1
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield drip
    finally:
        stop.set()
        thread.join()
        listener.close()
