"""Join tokens: shareable secrets that let a machine register as a peer of one run."""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import Conflict, NotFound
from server.models import JoinToken, Run, utcnow
from server.security import token_hash
from server.services.events import record_event
from server.services.runs import JOINABLE_STATUSES

JOIN_TOKEN_PREFIX = "swh_"


def issue_token(
    session: Session, run: Run, *, label: str, max_peers: int, verifier: bool = False
) -> tuple[JoinToken, str]:
    """A new token for the run; returns the row and the plaintext, which is not stored."""
    if run.status not in JOINABLE_STATUSES:
        raise Conflict(f"run is {run.status}; it accepts no new peers")
    # The prefix names what it is and keeps a token from starting with '-', which a shell
    # command line (`swarmhub-peer join URL --token ...`) would take for an option.
    plaintext = JOIN_TOKEN_PREFIX + secrets.token_urlsafe(24)
    token = JoinToken(
        run_id=run.id, token_hash=token_hash(plaintext), label=label, max_peers=max_peers, verifier=verifier
    )
    session.add(token)
    session.flush()
    record_event(
        session,
        run_id=run.id,
        kind="token_issued",
        message=f"{'verifier' if verifier else 'join'} token {token.id} issued"
        + (f" ({label})" if label else ""),
        data={"token_id": token.id},
    )
    return token, plaintext


def list_tokens(session: Session, run_id: int) -> list[JoinToken]:
    return list(
        session.scalars(sa.select(JoinToken).where(JoinToken.run_id == run_id).order_by(JoinToken.id))
    )


def get_token(session: Session, run_id: int, token_id: int) -> JoinToken:
    token = session.get(JoinToken, token_id)
    if token is None or token.run_id != run_id:
        raise NotFound(f"join token {token_id} not found")
    return token


def revoke_token(session: Session, token: JoinToken) -> bool:
    """Revoke; False if it already was (revoking is idempotent)."""
    if token.revoked_at is not None:
        return False
    token.revoked_at = utcnow()
    session.flush()
    record_event(
        session,
        run_id=token.run_id,
        kind="token_revoked",
        message=f"join token {token.id} revoked",
        data={"token_id": token.id},
    )
    return True


def find_usable_token(session: Session, plaintext: str) -> JoinToken | None:
    token = session.scalar(sa.select(JoinToken).where(JoinToken.token_hash == token_hash(plaintext)))
    if token is None or token.revoked_at is not None:
        return None
    return token
