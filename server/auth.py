"""Who is calling: session cookie (browsers, with CSRF) or `Authorization: Bearer` (API clients)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Response, status
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from server.deps import SessionDep
from server.models import AuthSession, User
from server.services.accounts import find_session, touch
from swarmhub.settings import ServerSettings

SESSION_COOKIE = "swarmhub_session"
CSRF_COOKIE = "swarmhub_csrf"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

# Declared as security schemes so /docs shows both ways in; they never reject by themselves.
_bearer_scheme = HTTPBearer(auto_error=False, description="Session token returned by /api/auth/login")
_cookie_scheme = APIKeyCookie(name=SESSION_COOKIE, auto_error=False, description="Browser session")


@dataclass(frozen=True)
class Caller:
    user: User
    session: AuthSession

    @property
    def is_admin(self) -> bool:
        return self.user.role == "admin"


def _unauthenticated(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def get_caller(
    request: Request,
    session: SessionDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
    cookie: Annotated[str | None, Depends(_cookie_scheme)],
) -> Caller:
    token = bearer.credentials if bearer is not None else cookie
    if not token:
        raise _unauthenticated("not logged in: send the session cookie or an Authorization: Bearer token")
    settings: ServerSettings = request.app.state.settings
    found = find_session(session, token, idle_minutes=settings.session_idle_minutes)
    if found is None:
        raise _unauthenticated("session expired or invalid: log in again")
    auth_session, user = found
    touch(session, auth_session)
    # A bearer token cannot be attached by a third-party site, a cookie can: only cookies need CSRF.
    if bearer is None and request.method not in SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), auth_session.csrf_token.encode()):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"missing or wrong CSRF token: send the {CSRF_COOKIE} cookie's value"
                f" in the {CSRF_HEADER} header",
            )
    return Caller(user=user, session=auth_session)


def require_admin(caller: Annotated[Caller, Depends(get_caller)]) -> Caller:
    if not caller.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admins only")
    return caller


CurrentUser = Annotated[Caller, Depends(get_caller)]
AdminUser = Annotated[Caller, Depends(require_admin)]


def cookies_secure(request: Request, settings: ServerSettings) -> bool:
    # The scheme is https behind a trusted proxy that says so (X-Forwarded-Proto, forwarded_allow_ips).
    return settings.secure_cookies or request.url.scheme == "https"


def set_session_cookies(
    response: Response, *, secure: bool, token: str, csrf_token: str, max_age: int
) -> None:
    common = {"max_age": max_age, "secure": secure, "samesite": "lax", "path": "/"}
    response.set_cookie(SESSION_COOKIE, token, httponly=True, **common)
    # Readable by the page's script, which echoes it in X-CSRF-Token; another site cannot read it.
    response.set_cookie(CSRF_COOKIE, csrf_token, httponly=False, **common)


def clear_session_cookies(response: Response, *, secure: bool) -> None:
    for name in (SESSION_COOKIE, CSRF_COOKIE):
        response.delete_cookie(name, path="/", secure=secure, samesite="lax")
