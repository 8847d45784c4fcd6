"""What every dashboard page shares: its templates, its security headers, the signed-in
tenant's session (`session.py`) and the CSRF check of a form's action."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from thresher.service.state import ServiceState
from thresher.service.ui.session import COOKIE, Session, SessionKey

TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self';"
    " img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none';"
    " base-uri 'none'; object-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def session_key(state: ServiceState) -> SessionKey:
    return SessionKey.of(state.config.webhook_secret or "")


def signed_in(request: Request, state: ServiceState) -> Session | None:
    """The signed-in tenant's session, while its token still exists."""
    session = session_key(state).open(request.cookies.get(COOKIE))
    if session is None or state.store.tokens.tenant_of(session.digest) != session.tenant:
        return None
    return session


def page(request: Request, template: str, code: int = 200, /, **context: Any) -> HTMLResponse:
    response = TEMPLATES.TemplateResponse(request, template, context, status_code=code)
    response.headers.update(SECURITY_HEADERS)
    return response


def to_login() -> Response:
    return RedirectResponse("/ui/login", status_code=303, headers=SECURITY_HEADERS)


def back_to(path: str) -> Response:
    """After a form's action: the page it came from (303, so a reload does not repeat it)."""
    return RedirectResponse(path, status_code=303, headers=SECURITY_HEADERS)


def checked(request: Request, state: ServiceState, csrf: str) -> Session | None:
    """The session of a form's action, when its CSRF token is the session's."""
    session = signed_in(request, state)
    if session is None or csrf != session_key(state).csrf(session):
        return None
    return session
