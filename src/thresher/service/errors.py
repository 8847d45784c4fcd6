"""What the service answers when a request cannot be served: one error class per HTTP
status, each carrying a message that says what was wrong and what to do instead.

`app.py` turns every `ServiceError` into `{"detail": message}` with its status, so code
anywhere in the service (routers, `ServiceState.submit_job`) raises these and never
builds a response itself.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from thresher.errors import MAX_PROBLEMS, ThresherError


class ServiceError(ThresherError):
    """A request the service refuses; `status` is the HTTP status it answers with."""

    stage = "service"
    status = 400
    headers: dict[str, str] | None = None

    def __init__(self, message: str | list[str]) -> None:
        if not isinstance(message, str) and len(message) > MAX_PROBLEMS:
            more = f"… and {len(message) - MAX_PROBLEMS:,} more problems"
            message = [*message[:MAX_PROBLEMS], more]
        self.detail: str | list[str] = message
        super().__init__(message if isinstance(message, str) else "; ".join(message))


class BadRequest(ServiceError):
    """The request is malformed or names something that cannot be read (400)."""

    status = 400


class Unauthorized(ServiceError):
    """No bearer token, or one the server does not know (401)."""

    status = 401
    headers = {"WWW-Authenticate": "Bearer"}  # noqa: RUF012 - read-only


class Forbidden(ServiceError):
    """The request asks for something this server never gives out (403), such as a
    server-side path outside `allowed_roots`."""

    status = 403


class NotFound(ServiceError):
    """No such file or job — or one that belongs to another tenant (404)."""

    status = 404


class Conflict(ServiceError):
    """The resource is not in a state that allows this (409): results of a running job."""

    status = 409


class RequestTimeout(ServiceError):
    """A request body that came too slowly (408); the connection is closed after it."""

    status = 408
    headers = {"Connection": "close"}  # noqa: RUF012 - read-only


class TooLarge(ServiceError):
    """An upload past `max_upload_bytes`, a JSON body past `max_request_bytes` (413)."""

    status = 413


class Unprocessable(ServiceError):
    """A well-formed request whose values do not make a job (422): an unknown model name,
    an unknown field, a bad batch size. `detail` lists the problems (the first
    MAX_PROBLEMS, then how many more), each naming its field."""

    status = 422


class TooManyRequests(ServiceError):
    """A tenant over one of its limits (429): the message names the limit and its value;
    `retry_after` (seconds), where waiting helps, is sent as `Retry-After`."""

    status = 429

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        if retry_after is not None:
            self.headers = {"Retry-After": str(max(1, retry_after))}


def as_response(exc: ServiceError, detail: str | list[str] | None = None) -> JSONResponse:
    """What the client gets for `exc`: `{"detail": message}` (or the `detail` given: the
    message as the tenant may read it) with its status."""
    shown = exc.detail if detail is None else detail
    return JSONResponse({"detail": shown}, status_code=exc.status, headers=exc.headers)
