"""Login (throttled), logout, the current user, passwords and sessions, and accounts by admins."""

from __future__ import annotations

import math

from fastapi import APIRouter, HTTPException, Request, Response, status

from server.auth import AdminUser, CurrentUser, clear_session_cookies, cookies_secure, set_session_cookies
from server.deps import MAX_ID, SessionDep, SettingsDep
from server.errors import Conflict, NotFound, Unprocessable
from server.models import User
from server.schemas import (
    ErrorOut,
    LoginRequest,
    LoginResponse,
    PasswordChange,
    SessionsEnded,
    UserCreate,
    UserOut,
    UserUpdate,
)
from server.services import accounts, login_throttle

router = APIRouter(tags=["auth"], responses={401: {"model": ErrorOut}})


def _client_address(request: Request) -> str:
    # Behind a trusted proxy uvicorn puts the forwarded client here (forwarded_allow_ips).
    return request.client.host if request.client is not None else "unknown"


@router.post("/api/auth/login", responses={429: {"model": ErrorOut}})
def login(
    body: LoginRequest, request: Request, response: Response, session: SessionDep, settings: SettingsDep
) -> LoginResponse:
    """Log in. After repeated failures for an account from an address, from an address, or for an
    account from anywhere, further tries are refused (429, with Retry-After) for a time that doubles
    with each failure, up to 15 minutes."""
    address = _client_address(request)
    keys = login_throttle.keys(body.username, address)
    wait = login_throttle.retry_after_s(session, keys)
    if wait > 0:
        seconds = math.ceil(wait)
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"too many failed logins for this account or from this address: try again in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )
    user = accounts.authenticate(session, body.username, body.password)
    if user is None:
        login_throttle.record_failure(session, keys)
        session.commit()
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid username or password")
    login_throttle.record_success(session, body.username, address)
    auth_session, token = accounts.start_session(session, user, days=settings.session_days)
    session.commit()
    set_session_cookies(
        response,
        secure=cookies_secure(request, settings),
        token=token,
        csrf_token=auth_session.csrf_token,
        max_age=settings.session_days * 86400,
    )
    return LoginResponse(
        token=token,
        csrf_token=auth_session.csrf_token,
        expires_at=auth_session.expires_at,
        user=UserOut.model_validate(user),
    )


@router.post("/api/auth/logout", status_code=status.HTTP_204_NO_CONTENT, responses={403: {"model": ErrorOut}})
def logout(
    caller: CurrentUser, request: Request, response: Response, session: SessionDep, settings: SettingsDep
) -> None:
    accounts.end_session(session, caller.session)
    session.commit()
    clear_session_cookies(response, secure=cookies_secure(request, settings))


@router.get("/api/auth/me")
def me(caller: CurrentUser) -> UserOut:
    return UserOut.model_validate(caller.user)


@router.post("/api/auth/password", responses={403: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def change_password(body: PasswordChange, caller: CurrentUser, session: SessionDep) -> SessionsEnded:
    """Change your password (at least 12 characters, not your username); every other session of yours
    ends, this one stays."""
    ended = accounts.change_password(
        session,
        caller.user,
        current=body.current_password,
        new=body.new_password,
        keep_session=caller.session.id,
    )
    session.commit()
    return SessionsEnded(ended=ended)


@router.post("/api/auth/sessions/end-others", responses={403: {"model": ErrorOut}})
def end_other_sessions(caller: CurrentUser, session: SessionDep) -> SessionsEnded:
    """Log out everywhere else (another browser, a lost laptop, an API token); this session stays."""
    ended = accounts.end_sessions(session, caller.user.id, keep=caller.session.id)
    session.commit()
    return SessionsEnded(ended=ended)


@router.get("/api/users", tags=["users"], responses={403: {"model": ErrorOut}})
def list_users(_admin: AdminUser, session: SessionDep) -> list[UserOut]:
    return [UserOut.model_validate(user) for user in accounts.list_users(session)]


@router.post(
    "/api/users",
    status_code=status.HTTP_201_CREATED,
    tags=["users"],
    responses={403: {"model": ErrorOut}, 409: {"model": ErrorOut}},
)
def create_user(body: UserCreate, _admin: AdminUser, session: SessionDep) -> UserOut:
    if accounts.get_user_by_name(session, body.username) is not None:
        raise Conflict(f"username {body.username!r} is taken")
    user = accounts.create_user(session, username=body.username, password=body.password, role=body.role)
    session.commit()
    return UserOut.model_validate(user)


@router.patch(
    "/api/users/{user_id}",
    tags=["users"],
    responses={403: {"model": ErrorOut}, 404: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)
def update_user(user_id: int, body: UserUpdate, admin: AdminUser, session: SessionDep) -> UserOut:
    """Disable a user (their sessions end at once, their feeds close) or enable them again."""
    if not 1 <= user_id <= MAX_ID or (user := session.get(User, user_id)) is None:
        raise NotFound(f"user {user_id} not found")
    if user.id == admin.user.id and body.disabled:
        raise Unprocessable("you cannot disable yourself")
    accounts.set_disabled(session, user, body.disabled)
    session.commit()
    return UserOut.model_validate(user)
