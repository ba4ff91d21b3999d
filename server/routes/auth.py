"""Login, logout, the current user, and account creation by admins."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status

from server.auth import AdminUser, CurrentUser, clear_session_cookies, set_session_cookies
from server.deps import SessionDep, SettingsDep
from server.errors import Conflict
from server.schemas import ErrorOut, LoginRequest, LoginResponse, UserCreate, UserOut
from server.services import accounts

router = APIRouter(tags=["auth"], responses={401: {"model": ErrorOut}})


@router.post("/api/auth/login")
def login(
    body: LoginRequest, response: Response, session: SessionDep, settings: SettingsDep
) -> LoginResponse:
    user = accounts.authenticate(session, body.username, body.password)
    if user is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid username or password")
    auth_session, token = accounts.start_session(session, user, days=settings.session_days)
    session.commit()
    set_session_cookies(
        response,
        settings,
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
def logout(caller: CurrentUser, response: Response, session: SessionDep, settings: SettingsDep) -> None:
    accounts.end_session(session, caller.session)
    session.commit()
    clear_session_cookies(response, settings)


@router.get("/api/auth/me")
def me(caller: CurrentUser) -> UserOut:
    return UserOut.model_validate(caller.user)


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
