"""What `thresher serve` writes to its log: a line per request (the access log), every
line carrying the request id it was written for, as text or as one JSON object a line.

A request's id is the `x-request-id` it came with (when it is a short printable token),
else a new one; it goes back on the response, into every log line written while the
request is served, and into the job the request submits (`job.request_id`), whose job
process writes its lines with it and the job's id. `--log-format json` is for log
shippers (Loki, Elasticsearch, CloudWatch): `time`, `level`, `logger`, `message`, and
`request_id`, `job_id` and the access fields where they apply. The settings reach the
job processes through the environment (`THRESHER_LOG_FORMAT`, `THRESHER_LOG_LEVEL`), as
they are forked from a server that set it.

The CLI's other commands keep their human lines; this is the service's.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

from prometheus_client import Histogram

from thresher.worker import tracing

__all__ = [
    "FORMATS",
    "HTTP_SECONDS",
    "LEVELS",
    "RequestLog",
    "configure",
    "current_request_id",
    "logging_context",
]

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
FORMAT_VARIABLE, LEVEL_VARIABLE = "THRESHER_LOG_FORMAT", "THRESHER_LOG_LEVEL"
HEADER = "x-request-id"
_GOOD_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")  # anything else is replaced, not logged
_ACCESS = ("method", "path", "status", "duration_ms", "tenant")
_TEXT = "%(asctime)s %(levelname)s %(name)s%(ids)s: %(message)s"

_context: ContextVar[dict[str, str] | None] = ContextVar("thresher_log_context", default=None)
access = logging.getLogger("thresher.access")
HTTP_SECONDS = Histogram(
    "thresher_http_request_duration_seconds",
    "HTTP requests, by method, route template and status, and how long each took.",
    ["method", "path", "status"],
    registry=None,  # `/metrics` joins it to the host-wide view at each scrape
)


def current_request_id() -> str | None:
    """The id of the request being served on this thread or task, if any."""
    return (_context.get() or {}).get("request_id")


@contextmanager
def logging_context(**ids: str | None) -> Iterator[None]:
    """Every log line written inside carries these ids (`request_id`, `job_id`)."""
    token = _context.set({**(_context.get() or {}), **{k: v for k, v in ids.items() if v}})
    try:
        yield
    finally:
        _context.reset(token)


def configure(form: Literal["text", "json"] | None = None, level: str | None = None) -> None:
    """The process's log lines to stderr in `form` at `level`, both remembered in the
    environment for the job processes this one starts (read from it when not given)."""
    form = form or os.environ.get(FORMAT_VARIABLE, "text")  # type: ignore[assignment]
    level = level or os.environ.get(LEVEL_VARIABLE, "info")
    os.environ[FORMAT_VARIABLE], os.environ[LEVEL_VARIABLE] = str(form), level
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_WithIds())
    handler.setFormatter(JsonLines() if form == "json" else logging.Formatter(_TEXT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


class _WithIds(logging.Filter):
    """Puts the context's ids on each record (`record.request_id`, `record.job_id`) and
    their text form (`record.ids`) for the text format."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = _context.get() or {}
        for key in ("request_id", "job_id"):
            if not hasattr(record, key):
                setattr(record, key, ids.get(key))
        shown = [f"{k}={v}" for k in ("request_id", "job_id") if (v := getattr(record, k))]
        record.__dict__["ids"] = f" [{' '.join(shown)}]" if shown else ""
        return True


class JsonLines(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, the ids and
    an access line's fields when set, and the traceback as `exception`."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "job_id", *_ACCESS):
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class RequestLog:
    """ASGI middleware: each HTTP request gets its id (kept from `x-request-id` when it
    is a plain token of at most 128 characters, else made), served inside its logging
    context, answered with the id in `x-request-id`, and logged once it is answered:
    method, the route's path template (never a raw path with ids in it), status,
    duration and the tenant the token named."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = headers.get(HEADER.encode(), b"").decode("latin-1")
        request_id = given if _GOOD_ID.match(given) else uuid.uuid4().hex
        started, status = time.perf_counter(), 500

        async def answer(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                ours = (HEADER.encode(), request_id.encode())
                message["headers"] = [*message.get("headers", []), ours]
            await send(message)

        method = str(scope.get("method"))
        parent = headers.get(b"traceparent", b"").decode("latin-1")
        with (
            logging_context(request_id=request_id),
            tracing.span(f"HTTP {method}", parent or None, request_id=request_id) as traced,
        ):
            try:
                await self.app(scope, receive, answer)
            finally:
                path = _log_access(scope, status, time.perf_counter() - started)
                traced.rename(f"{method} {path}")
                traced.set(method=method, route=path, status=status)


def _log_access(scope: MutableMapping[str, Any], status: int, seconds: float) -> str:
    """Log a request answered; its route's path template."""
    route = scope.get("route")
    path = getattr(route, "path", None) or "(no route)"
    tenant = (scope.get("state") or {}).get("tenant")
    fields = {"method": scope.get("method"), "path": path, "status": status}
    fields |= {"duration_ms": round(seconds * 1000, 1), "tenant": tenant}
    access.info(
        "%s %s %s %.1f ms tenant=%s", fields["method"], path, status, fields["duration_ms"],
        tenant or "-", extra=fields,
    )  # fmt: skip
    HTTP_SECONDS.labels(str(fields["method"]), path, str(status)).observe(seconds)
    return str(path)
