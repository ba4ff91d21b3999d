"""Secrets: password hashing (argon2) and random tokens stored only as their sha256."""

from __future__ import annotations

import hashlib
import secrets
from concurrent.futures import ThreadPoolExecutor

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

ARGON2_MEMORY_KIB = 19 * 1024
ARGON2_TIME_COST = 2
# OWASP's argon2id baseline (19 MiB, 2 passes, 1 lane). argon2-cffi's default takes 64 MiB per hash,
# so 16 concurrent wrong logins held about 1 GB. Hashes run on a pool of `password_hash_concurrency`
# threads of their own (2 by default): at most that many run at once, a login waits its turn, and
# only those threads' malloc arenas ever hold argon2's memory (freed blocks stay in the arena of the
# thread that used them, so hashing on any of the server's 40 worker threads would keep up to
# 40 x 19 MiB resident).
_hasher = PasswordHasher(memory_cost=ARGON2_MEMORY_KIB, time_cost=ARGON2_TIME_COST, parallelism=1)
# Verified against when the username is unknown, so a login takes as long either way.
_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))
_slots = 2
_pool = ThreadPoolExecutor(max_workers=_slots, thread_name_prefix="argon2")


def set_hash_concurrency(slots: int) -> None:
    """Bound how many hashes run at once in this process (settings.password_hash_concurrency)."""
    global _pool, _slots
    if slots != _slots:
        old, _pool, _slots = _pool, ThreadPoolExecutor(max_workers=slots, thread_name_prefix="argon2"), slots
        old.shutdown(wait=False)


def hash_password(password: str) -> str:
    return _pool.submit(_hasher.hash, password).result()


def _verify(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def verify_password(password_hash: str | None, password: str) -> bool:
    ok = _pool.submit(_verify, password_hash or _DUMMY_HASH, password).result()
    return ok and password_hash is not None


def needs_rehash(password_hash: str) -> bool:
    """True for hashes made with other parameters (argon2-cffi's 64 MiB default, before this)."""
    try:
        return _hasher.check_needs_rehash(password_hash)
    except InvalidHashError:
        return True


MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 1024


def password_problem(password: str, username: str) -> str | None:
    """Why a new password is refused, or None. Length only: composition rules make passwords
    harder to remember, not to guess (NIST SP 800-63B)."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return (
            f"password too short: use at least {MIN_PASSWORD_LENGTH} characters"
            " (a few words are easy to remember and hard to guess)"
        )
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"password too long: at most {MAX_PASSWORD_LENGTH} characters"
    if password.strip().lower() == username.strip().lower():
        return "password must not be the username"
    return None


def new_token(nbytes: int = 32) -> str:
    return secrets.token_urlsafe(nbytes)


def token_hash(token: str) -> str:
    """Tokens are long and random, so a plain sha256 is enough to make a stolen table useless."""
    return hashlib.sha256(token.encode()).hexdigest()
