"""OpenAI's error envelope, on the paths OpenAI's clients call.

`{"error": {"message", "type", "param", "code"}}` with an `x-request-id` header, as the
official client reads it; thresher's own `detail` stays beside it. On `/v1/batches`,
`/v1/embeddings` and `/v1/webhook_endpoints` a request that does not validate is 400,
never 409 or 422 (the client retries 409).
"""

from __future__ import annotations

import secrets
from typing import Any

OPENAI_PATHS = (
    "/v1/batches",
    "/v1/files",
    "/v1/embeddings",
    "/v1/webhook_endpoints",
    "/v1/models",
)
BATCH_PATHS = ("/v1/batches", "/v1/embeddings", "/v1/webhook_endpoints")
TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}

__all__ = ["OPENAI_PATHS", "envelope", "is_openai_path", "openai_status"]


def is_openai_path(path: str) -> bool:
    return path.startswith(OPENAI_PATHS)


def openai_status(path: str, status: int) -> int:
    """The status OpenAI would answer: a refused value on a batch path is 400."""
    if path.startswith(BATCH_PATHS) and status in (409, 422):
        return 400
    return status


def envelope(detail: str | list[Any], status: int) -> tuple[dict[str, Any], dict[str, str]]:
    """The body's `error` member and the headers for a refused request."""
    problems = [detail] if isinstance(detail, str) else detail
    messages = [p["msg"] if isinstance(p, dict) and "msg" in p else str(p) for p in problems]
    first = problems[0] if problems else None
    param = _param(first)
    error = {
        "message": "; ".join(messages) or "invalid request",
        "type": TYPES.get(status, "invalid_request_error" if status < 500 else "server_error"),
        "param": param,
        "code": None,
    }
    return error, {"x-request-id": f"req_{secrets.token_hex(12)}"}


def _param(problem: Any) -> str | None:
    """The field a problem names: a validation error's `loc`, or `field: …`."""
    if isinstance(problem, dict) and problem.get("loc"):
        loc = [str(part) for part in problem["loc"] if part not in ("body", "query")]
        return ".".join(loc) or None
    if isinstance(problem, str) and ": " in problem:
        head = problem.split(": ", 1)[0]
        return head if " " not in head else None
    return None
