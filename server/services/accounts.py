"""Users and their login sessions."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import Unprocessable
from server.models import AuthSession, User, utcnow
from server.security import (
    hash_password,
    needs_rehash,
    new_token,
    password_problem,
    token_hash,
    verify_password,
)

TOUCH_EVERY = timedelta(minutes=1)
"""How stale `last_seen_at` may get before a request writes it: idle expiry to within a minute,
without a write per request."""


def check_password_policy(password: str, username: str) -> None:
    problem = password_problem(password, username)
    if problem is not None:
        raise Unprocessable(problem)


def create_user(session: Session, *, username: str, password: str, role: str) -> User:
    user = User(username=username, password_hash=hash_password(password), role=role)
    session.add(user)
    session.flush()
    return user


def get_user_by_name(session: Session, username: str) -> User | None:
    return session.scalar(sa.select(User).where(User.username == username))


def list_users(session: Session) -> list[User]:
    return list(session.scalars(sa.select(User).order_by(User.id)))


def authenticate(session: Session, username: str, password: str) -> User | None:
    user = get_user_by_name(session, username)
    ok = verify_password(user.password_hash if user else None, password)
    if not ok or user is None or user.disabled:
        return None
    if needs_rehash(user.password_hash):
        user.password_hash = hash_password(password)
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


def find_session(session: Session, token: str, *, idle_minutes: float) -> tuple[AuthSession, User] | None:
    """The live session and enabled user a token belongs to, if any."""
    row = session.execute(
        sa.select(AuthSession, User)
        .join(User, AuthSession.user_id == User.id)
        .where(AuthSession.token_hash == token_hash(token))
    ).first()
    if row is None:
        return None
    auth_session, user = row.tuple()
    now = utcnow()
    if auth_session.expires_at <= now or user.disabled:
        return None
    if auth_session.last_seen_at + timedelta(minutes=idle_minutes) <= now:
        return None
    return auth_session, user


def touch(session: Session, auth_session: AuthSession) -> None:
    """Record a use of the session (committed at once, apart from whatever the request does)."""
    now = utcnow()
    if now - auth_session.last_seen_at < TOUCH_EVERY:
        return
    session.execute(sa.update(AuthSession).where(AuthSession.id == auth_session.id).values(last_seen_at=now))
    session.commit()


def end_session(session: Session, auth_session: AuthSession) -> None:
    session.delete(auth_session)
    session.flush()


def end_sessions(session: Session, user_id: int, *, keep: int | None = None) -> int:
    """End every session of a user (but `keep`); returns how many ended."""
    query = sa.delete(AuthSession).where(AuthSession.user_id == user_id)
    if keep is not None:
        query = query.where(AuthSession.id != keep)
    return session.execute(query).rowcount


def change_password(session: Session, user: User, *, current: str, new: str, keep_session: int) -> int:
    """Set a new password after checking the current one; ends the user's other sessions (a
    stolen one among them) and returns how many."""
    if not verify_password(user.password_hash, current):
        raise Unprocessable("the current password is wrong")
    check_password_policy(new, user.username)
    user.password_hash = hash_password(new)
    ended = end_sessions(session, user.id, keep=keep_session)
    session.flush()
    return ended


def set_disabled(session: Session, user: User, disabled: bool) -> None:
    """Disable (or enable) a user; a disabled user's sessions end at once."""
    user.disabled = disabled
    if disabled:
        end_sessions(session, user.id)
    session.flush()


def purge_expired_sessions(session: Session, *, idle_minutes: float) -> int:
    """Delete sessions past their expiry or idle too long; returns how many."""
    now = utcnow()
    result = session.execute(
        sa.delete(AuthSession).where(
            sa.or_(
                AuthSession.expires_at <= now,
                AuthSession.last_seen_at <= now - timedelta(minutes=idle_minutes),
            )
        )
    )
    return result.rowcount
