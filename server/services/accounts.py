"""Users and their login sessions."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.models import AuthSession, User, utcnow
from server.security import hash_password, new_token, token_hash, verify_password


def create_user(session: Session, *, username: str, password: str, role: str) -> User:
    user = User(username=username, password_hash=hash_password(password), role=role)
    session.add(user)
    session.flush()
    return user


def get_user_by_name(session: Session, username: str) -> User | None:
    return session.scalar(sa.select(User).where(User.username == username))


def authenticate(session: Session, username: str, password: str) -> User | None:
    user = get_user_by_name(session, username)
    ok = verify_password(user.password_hash if user else None, password)
    if not ok or user is None or user.disabled:
        return None
    return user


def start_session(session: Session, user: User, *, days: int) -> tuple[AuthSession, str]:
    """A new login; returns the row and the plaintext token, which is not stored."""
    token = new_token()
    auth_session = AuthSession(
        token_hash=token_hash(token),
        user_id=user.id,
        csrf_token=new_token(),
        expires_at=utcnow() + timedelta(days=days),
    )
    session.add(auth_session)
    session.flush()
    return auth_session, token


def find_session(session: Session, token: str) -> tuple[AuthSession, User] | None:
    """The live session and enabled user a token belongs to, if any."""
    row = session.execute(
        sa.select(AuthSession, User)
        .join(User, AuthSession.user_id == User.id)
        .where(AuthSession.token_hash == token_hash(token))
    ).first()
    if row is None:
        return None
    auth_session, user = row.tuple()
    if auth_session.expires_at <= utcnow() or user.disabled:
        return None
    return auth_session, user


def end_session(session: Session, auth_session: AuthSession) -> None:
    session.delete(auth_session)
    session.flush()
