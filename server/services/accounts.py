"""Users, their login sessions, and the single-use links admins issue (invitations, password resets)."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import Conflict, NotFound, Unprocessable
from server.models import AuthSession, Invitation, User, utcnow
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


LINK_UNUSABLE = "this link is invalid, expired or used already: ask an admin for a new one"


def issue_invitation(session: Session, *, by: User, role: str, hours: float) -> tuple[Invitation, str]:
    """A link that makes one new account with `role`; returns the row and the plaintext token."""
    return _issue(session, by=by, purpose="invite", role=role, user=None, hours=hours)


def issue_reset(session: Session, *, by: User, user: User, hours: float) -> tuple[Invitation, str]:
    """A link that sets a new password for `user`; earlier unused reset links for them stop working."""
    session.execute(
        sa.delete(Invitation).where(
            Invitation.purpose == "reset", Invitation.user_id == user.id, Invitation.used_at.is_(None)
        )
    )
    return _issue(session, by=by, purpose="reset", role=user.role, user=user, hours=hours)


def _issue(
    session: Session, *, by: User, purpose: str, role: str, user: User | None, hours: float
) -> tuple[Invitation, str]:
    token = new_token()
    invitation = Invitation(
        token_hash=token_hash(token),
        purpose=purpose,
        role=role,
        user_id=None if user is None else user.id,
        created_by=by.id,
        expires_at=utcnow() + timedelta(hours=hours),
    )
    session.add(invitation)
    session.flush()
    return invitation, token


def open_invitations(session: Session) -> list[Invitation]:
    """Links not used yet and not expired, oldest first."""
    return list(
        session.scalars(
            sa.select(Invitation)
            .where(Invitation.used_at.is_(None), Invitation.expires_at > utcnow())
            .order_by(Invitation.id)
        )
    )


def usernames(session: Session, ids: set[int]) -> dict[int, str]:
    if not ids:
        return {}
    rows = session.execute(sa.select(User.id, User.username).where(User.id.in_(ids)))
    return {user_id: username for user_id, username in rows}


def revoke_invitation(session: Session, invitation_id: int) -> None:
    deleted = session.execute(
        sa.delete(Invitation).where(Invitation.id == invitation_id, Invitation.used_at.is_(None))
    ).rowcount
    if deleted == 0:
        raise NotFound(f"no open invitation {invitation_id}")


def usable_invitation(session: Session, token: str) -> Invitation:
    """The unused, unexpired link a token opens; NotFound otherwise, whichever way it is unusable."""
    invitation = session.scalar(sa.select(Invitation).where(Invitation.token_hash == token_hash(token)))
    if invitation is None or invitation.used_at is not None or invitation.expires_at <= utcnow():
        raise NotFound(LINK_UNUSABLE)
    return invitation


def accept_invitation(session: Session, token: str, *, username: str | None, password: str) -> User:
    """Use a link once: an invitation makes the account `username`, a reset sets the password of
    the account it names (and ends that account's sessions). Returns the account."""
    invitation = usable_invitation(session, token)
    # Claimed with a conditional update, so two tabs racing on one link cannot both use it.
    claimed = session.execute(
        sa.update(Invitation)
        .where(Invitation.id == invitation.id, Invitation.used_at.is_(None))
        .values(used_at=utcnow())
    ).rowcount
    if claimed != 1:
        raise NotFound(LINK_UNUSABLE)
    if invitation.purpose == "reset":
        user = session.get_one(User, invitation.user_id)
        check_password_policy(password, user.username)
        user.password_hash = hash_password(password)
        end_sessions(session, user.id)
        session.flush()
        return user
    if username is None:
        raise Unprocessable("choose a username")
    if get_user_by_name(session, username) is not None:
        raise Conflict(f"username {username!r} is taken: choose another")
    check_password_policy(password, username)
    return create_user(session, username=username, password=password, role=invitation.role)


def purge_expired_invitations(session: Session) -> int:
    """Delete links past their expiry, used or not (a used one is worthless once it would have
    expired anyway); returns how many."""
    return session.execute(sa.delete(Invitation).where(Invitation.expires_at <= utcnow())).rowcount
