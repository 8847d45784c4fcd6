"""What a request may be: how large its body, how slowly it may come, and what its text
fields may hold.

- **Size.** A JSON body is read whole before its route runs (`BodyLimits`), and refused
  with 413 past `max_request_bytes`, whether its length was declared or it came chunked.
  An upload (`POST /v1/files`) streams to disk instead, under `max_upload_bytes`.
- **Pace.** A body must keep coming: it may take `body_timeout` seconds, plus one second
  for every `body_min_rate` bytes it has brought (Apache's mod_reqtimeout rule). A client
  that stalls or trickles a byte at a time (slowloris) is cut off with 408, and an upload
  it began leaves nothing behind. A fast upload of any size never meets the limit.
- **Text.** Names, ids, column names, paths and URLs in a request have a length and no
  control characters (`Text`, `LongText`): a NUL or an escape sequence in a name would
  reach logs, terminals and file systems.
- **Echo.** A 422 names each bad field and says what is wrong, without sending back the
  value (FastAPI's own answer repeats every rejected input, a 900 KB string included).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, StringConstraints
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from thresher.service.errors import RequestTimeout, ServiceError, TooLarge, as_response
from thresher.texts import printable

# A priority is a rank among a server's queued jobs, not a number to compute with.
PRIORITY_LIMIT = 1_000_000
# Columns a request may name (columns, keep_columns).
MAX_COLUMNS = 10_000
MAX_MESSAGE = 300  # characters of one validation message


Text = Annotated[str, StringConstraints(max_length=1024), AfterValidator(printable)]
"""A name, id or column name: at most 1,024 characters, none of them control characters
(nor lone surrogates, which no file or answer can hold)."""

LongText = Annotated[str, StringConstraints(max_length=4096), AfterValidator(printable)]
"""A path or URL: at most 4,096 characters, none of them control characters."""


@dataclass(frozen=True)
class Pace:
    """How slowly a body may come: `timeout` seconds, plus one per `min_rate` bytes."""

    timeout: float
    min_rate: float

    def deadline(self, started: float, received: int) -> float:
        return started + self.timeout + received / self.min_rate


async def paced(chunks: AsyncIterator[bytes], pace: Pace) -> AsyncIterator[bytes]:
    """`chunks` as they come, until they come slower than `pace` allows: then
    RequestTimeout (408)."""
    started, received = time.monotonic(), 0
    while True:
        left = pace.deadline(started, received) - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            chunk = await asyncio.wait_for(anext(chunks), left)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise RequestTimeout(
                f"the request body came too slowly (at least {pace.min_rate:,.0f} bytes/s "
                f"after the first {pace.timeout:g} s); send it again faster"
            ) from None
        received += len(chunk)
        yield chunk


async def body_chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The body of an ASGI request, chunk by chunk, as the client sends it."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


class BodyLimits:
    """ASGI middleware: each request's body read whole, within `max_bytes` and `pace`,
    before the app sees it — but for the `streamed` (method, path) routes, which read
    their own. Refusals answer 413 or 408 and close the connection."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, pace: Pace, streamed: Collection[tuple[str, str]]
    ) -> None:
        self.app, self.max_bytes, self.pace, self.streamed = app, max_bytes, pace, streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) in self.streamed:
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read(scope, receive)
        except ClientDisconnect:
            return  # no one to answer
        except ServiceError as exc:
            await as_response(exc)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_large()
        pieces, size = [], 0
        async for chunk in paced(body_chunks(receive), self.pace):
            size += len(chunk)
            if size > self.max_bytes:
                raise self._too_large()
            pieces.append(chunk)
        return b"".join(pieces)

    def _too_large(self) -> TooLarge:
        error = TooLarge(f"the request body is larger than this server's {self.max_bytes:,} bytes")
        error.headers = {"Connection": "close"}
        return error


def _replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A `receive` that gives the body read once, then waits on the client (disconnect)."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """422 for a body, query or header FastAPI could not validate: each problem's `loc`,
    `msg` and `type`, without the `input` that was sent."""
    assert isinstance(exc, RequestValidationError)
    detail = [_problem(error) for error in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)


def _problem(error: Any) -> dict[str, Any]:
    message = str(error.get("msg", ""))
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + "…"
    return {"type": error.get("type"), "loc": list(error.get("loc", ())), "msg": message}
