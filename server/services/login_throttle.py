"""Backoff after failed logins, per account name and per client address.

Kept in the database (table `login_throttle`) so that a restart does not reset it and every
coordinator worker sees the same counts. A locked key is refused before any password is hashed,
so a guessing client costs the coordinator a row lookup, not an argon2 hash.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from server.models import LoginThrottle, utcnow

FREE_FAILURES = {"pair": 5, "addr": 20, "user": 100}
"""Failures allowed before the backoff starts: for one account from one address; from one address
(which may hide several people behind a NAT) across accounts; for one account from anywhere (a
guesser with many addresses)."""
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 15 * 60.0
"""The longest lock. A guesser at one address locks only that address out of the account; the real
user elsewhere is locked out only by failures from many addresses, and then for at most this long."""
FORGET_AFTER = timedelta(hours=1)
"""A key with no failure for this long starts again from zero (and its row may be purged)."""


def keys(username: str, address: str) -> list[str]:
    name, where = username.lower()[:90], address[:90]
    return [f"pair:{name}@{where}", f"addr:{where}", f"user:{name}"]


def delay_s(kind: str, failures: int) -> float:
    """How long a key is locked after its `failures`-th failure in a row."""
    over = failures - FREE_FAILURES[kind]
    if over < 0:
        return 0.0
    return min(MAX_DELAY_S, FIRST_DELAY_S * 2.0 ** min(over, 30))


def retry_after_s(session: Session, login_keys: list[str], now: datetime | None = None) -> float:
    """Seconds until every key may try again; 0 when none is locked."""
    now = now or utcnow()
    rows = session.scalars(sa.select(LoginThrottle).where(LoginThrottle.key.in_(login_keys)))
    waits = [(row.locked_until - now).total_seconds() for row in rows if row.locked_until is not None]
    return max([0.0, *waits])


def record_failure(session: Session, login_keys: list[str]) -> None:
    now = utcnow()
    for key in login_keys:
        row = session.get(LoginThrottle, key, with_for_update=True)
        if row is None:
            try:
                with session.begin_nested():
                    row = LoginThrottle(key=key, failures=0, last_failure_at=now)
                    session.add(row)
            except IntegrityError:  # another worker inserted it first
                row = session.get_one(LoginThrottle, key, with_for_update=True, populate_existing=True)
        if now - row.last_failure_at > FORGET_AFTER:
            row.failures = 0
        row.failures += 1
        row.last_failure_at = now
        wait = delay_s(key.split(":", 1)[0], row.failures)
        row.locked_until = now + timedelta(seconds=wait) if wait else None
    session.flush()


def record_success(session: Session, username: str, address: str) -> None:
    """The account's counts restart; the address's does not (one good login must not buy more guesses
    at other accounts)."""
    pair, _, user = keys(username, address)
    session.execute(sa.delete(LoginThrottle).where(LoginThrottle.key.in_([pair, user])))


def purge(session: Session) -> int:
    """Delete the rows that no longer lock or count; returns how many."""
    now = utcnow()
    result = session.execute(
        sa.delete(LoginThrottle).where(
            LoginThrottle.last_failure_at < now - FORGET_AFTER,
            sa.or_(LoginThrottle.locked_until.is_(None), LoginThrottle.locked_until < now),
        )
    )
    return result.rowcount
