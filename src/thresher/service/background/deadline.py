"""A wall-clock deadline for one webhook attempt, whatever the receiver does.

httpx's timeouts bound each network operation (the connect, one read, one write), not
the whole: a receiver that sends one header byte every few seconds never trips a read
timeout and keeps the sending thread as long as it likes. `AttemptDeadline` bounds the
whole attempt — connect, send, the response's headers (the body is never read). Each
operation's timeout is cut to the time left when the request is built, and when the time
is up a timer shuts the attempt's socket down, which ends a read or write blocked on it
(a TLS handshake's included) at once.

The socket is learnt from httpcore's `trace` extension as the connection is made, so the
request still goes to the very address the URL policy checked. The client must not keep
connections alive between attempts (`webhook_client`): a reused connection is not seen
being made, so it could not be watched.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType
from typing import Any

import httpx2 as httpx

__all__ = ["AttemptDeadline"]

CONNECTED = "connection.connect_tcp.complete"  # the trace event of a new connection


class AttemptDeadline:
    """`with AttemptDeadline(10.0) as limit:` one request built with `limit.timeout()`
    and `extensions={"trace": limit.trace}`; `limit.expired` says whether it was cut."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._ends = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._watched: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> AttemptDeadline:
        self._timer.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._timer.cancel()
        with self._lock:
            for watched in self._watched:
                watched.close()
            self._watched.clear()

    def timeout(self) -> httpx.Timeout:
        """Each operation's limit: the time left, so none outlasts the deadline alone."""
        return httpx.Timeout(max(self._ends - time.monotonic(), 0.001))

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's `trace` hook: watch the socket of each connection the attempt makes.
        A duplicate of it is kept, so the shutdown reaches the connection even after TLS
        has wrapped (and detached) the original socket object."""
        if event != CONNECTED:
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        watched = sock.dup()
        with self._lock:
            self._watched.append(watched)
            if self.expired:
                _shut(watched)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for watched in self._watched:
                _shut(watched)


def _shut(watched: socket.socket) -> None:
    """Shut a connection down both ways: a thread blocked reading or writing it returns."""
    with contextlib.suppress(OSError):  # already closed by the other side
        watched.shutdown(socket.SHUT_RDWR)
