"""One webhook attempt: to the very address the URL policy checked, within a wall-clock
deadline, whatever the receiver does.

`post_webhook` resolves and checks the URL now (`urls.py`) and connects
to the address it checked, with no proxy and no redirect followed (`webhook_client`).

httpx's timeouts bound each network operation (the connect, one read, one write), not
the whole: a receiver that sends one header byte every few seconds never trips a read
timeout and keeps the sending thread as long as it likes. `AttemptDeadline` bounds the
whole attempt — connect, send, the response's headers (the body is never read). Each
operation's timeout is cut to the time left when the request is built, and when the time
is up a timer shuts the attempt's socket down, which ends a read or write blocked on it
(a TLS handshake's included) at once. The socket is learnt from httpcore's `trace`
extension as the connection is made; the client keeps no connection alive between
attempts, since a reused connection is not seen being made and could not be watched.
(The DNS lookup before the connect is the resolver's, bounded by its own timeouts.)
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx2 as httpx

from thresher.notify.retries import retry_after_seconds
from thresher.notify.urls import resolve_webhook_url

__all__ = ["Answer", "AttemptDeadline", "post_webhook", "webhook_client"]

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


def webhook_client() -> httpx.Client:
    """The HTTP client webhooks are sent with: no proxy from the environment, no redirect
    followed (a redirect's target was never checked), and a new connection for every
    attempt, so each goes to the address checked for it and its deadline sees it made."""
    return httpx.Client(
        trust_env=False, follow_redirects=False, limits=httpx.Limits(max_keepalive_connections=0)
    )


def post_webhook(
    client: httpx.Client,
    url: str,
    body: bytes,
    signature: dict[str, str],
    allow_private: bool,
    *,
    deadline: float = 10.0,
) -> Answer:
    """POST one signed JSON message to `url` as the URL policy allows it now, connecting to
    the very address it checked (whatever DNS says next), all within `deadline` seconds
    of wall-clock time; the receiver's answer (status, Retry-After). ValueError when the
    policy refuses the URL, httpx.TransportError when it cannot be reached
    (httpx.TimeoutException when it has not answered by the deadline). `client` is a
    `webhook_client()`."""
    with AttemptDeadline(deadline) as limit:
        addresses = resolve_webhook_url(url, allow_private)
        headers = {"Content-Type": "application/json", "User-Agent": "thresher-webhooks"}
        headers.update(signature)
        target = httpx.URL(url)
        extensions: dict[str, Any] = {"trace": limit.trace}
        if addresses:
            headers["Host"] = target.netloc.decode("ascii")
            extensions["sni_hostname"] = target.host
            target = target.copy_with(host=str(addresses[0]))
        request = client.build_request(
            "POST", target, content=body, headers=headers, timeout=limit.timeout(),
            extensions=extensions,
        )  # fmt: skip
        try:
            response = client.send(request, stream=True)  # the status is the answer
            response.close()  # no body read
        except httpx.TransportError as exc:
            if not limit.expired:
                raise
            message = f"no answer within the {deadline:g} s deadline"
            raise httpx.TimeoutException(message, request=request) from exc
    wait = retry_after_seconds(response.headers.get("retry-after"))
    return Answer(response.status_code, wait)


@dataclass(frozen=True)
class Answer:
    """What a receiver answered: its HTTP status, and the seconds its `Retry-After` asks
    to wait (None when it sent none)."""

    status: int
    retry_after: float | None = None
