"""The ledger's rows: a peer's account opened at registration, step credits added, totals read.

Functions work in the caller's session and only flush; the caller commits.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import NotFound
from server.ledger.schemas import (
    Contribution,
    OwnContribution,
    ParticipantContribution,
    PeerContribution,
    RunLedger,
)
from server.models import JoinToken, Peer, PeerLedger, Run, Step, utcnow
from server.policies.ledger import PeerCredit
from server.security import new_token, token_hash

COUNTERS = tuple(Contribution.model_fields)
CSV_COLUMNS = ("peer_id", "peer_name", "participant_id", "participant", "state", "stage", *COUNTERS)


def open_account(session: Session, peer: Peer) -> str:
    """The peer's ledger row, with the token of its participant's own view (returned once, kept hashed)."""
    token = new_token()
    session.add(PeerLedger(peer_id=peer.id, run_id=peer.run_id, view_token_hash=token_hash(token)))
    session.flush()
    return token


def _account(session: Session, run_id: int, peer_id: int) -> PeerLedger:
    row = session.get(PeerLedger, peer_id)
    if row is None:  # a peer registered before the ledger existed
        row = PeerLedger(peer_id=peer_id, run_id=run_id, **dict.fromkeys(COUNTERS, 0))
        session.add(row)
    return row


_LEDGER = PeerLedger.__table__
_ADD = (
    sa.update(_LEDGER)
    .where(_LEDGER.c.peer_id == sa.bindparam("d_peer_id"))
    .values(
        {
            **{name: _LEDGER.c[name] + sa.bindparam(f"d_{name}") for name in COUNTERS},
            "updated_at": sa.bindparam("d_now"),
        }
    )
)
"""Adds to the totals in the database (one statement for a step's credits, whatever their number)."""


def add_credits(session: Session, run_id: int, credits: Sequence[PeerCredit]) -> None:
    """Add one step's credits to the peers' totals (in the step's own transaction)."""
    if not credits:
        return
    ids = [c.peer_id for c in credits]
    have = set(session.scalars(sa.select(PeerLedger.peer_id).where(PeerLedger.peer_id.in_(ids))))
    for peer_id in ids:
        if peer_id not in have:
            _account(session, run_id, peer_id)
    session.flush()
    now = utcnow()
    session.execute(
        _ADD,
        [
            {"d_peer_id": c.peer_id, "d_now": now, "d_steps": 1}
            | {f"d_{name}": getattr(c, name) for name in COUNTERS if name != "steps"}
            for c in credits
        ],
    )
    # Rows of the ledger this session holds are stale now.
    for held in list(session.identity_map.values()):
        if isinstance(held, PeerLedger):
            session.expire(held)


def count_failure(session: Session, peer: Peer) -> None:
    """The peer was lost (vanished, or went silent)."""
    _account(session, peer.run_id, peer.id).failures += 1
    session.flush()


def _rank_key(c: Contribution) -> tuple[int, float]:
    return (-(c.samples_trained + c.samples_served), -c.compute_s)


def _participant_name(token_id: int | None, label: str | None) -> str:
    if token_id is None:
        return "deleted token"
    return label or f"token {token_id}"


def run_ledger(session: Session, run: Run) -> RunLedger:
    """Every peer's totals (peers with nothing credited yet included) and their participants' sums."""
    rows = session.execute(
        sa.select(Peer, PeerLedger, JoinToken.label)
        .outerjoin(PeerLedger, PeerLedger.peer_id == Peer.id)
        .outerjoin(JoinToken, JoinToken.id == Peer.join_token_id)
        .where(Peer.run_id == run.id)
    ).all()
    peers = [
        PeerContribution(
            peer_id=peer.id,
            peer_name=peer.name,
            state=peer.state,
            stage=peer.stage,
            participant_id=peer.join_token_id,
            participant=_participant_name(peer.join_token_id, label),
            **({name: getattr(ledger, name) for name in COUNTERS} if ledger is not None else {}),
        )
        for peer, ledger, label in rows
    ]
    peers.sort(key=lambda p: (*_rank_key(p), p.peer_id))
    groups: dict[int | None, list[PeerContribution]] = {}
    for p in peers:
        groups.setdefault(p.participant_id, []).append(p)
    participants = [
        ParticipantContribution(
            participant_id=token_id,
            participant=members[0].participant,
            peers=len(members),
            **{name: sum(getattr(m, name) for m in members) for name in COUNTERS},
        )
        for token_id, members in groups.items()
    ]
    participants.sort(key=lambda p: (*_rank_key(p), p.participant_id or 0))
    counted = samples_counted(session, run.id)
    return RunLedger(run_id=run.id, samples_counted=counted, peers=peers, participants=participants)


def samples_counted(session: Session, run_id: int) -> int:
    """Samples every stage counted, summed over the run's recorded steps."""
    counts = session.scalars(sa.select(Step.samples_counted).where(Step.run_id == run_id))
    return sum(min(stages, default=0) for stages in counts)


def ledger_csv(ledger: RunLedger) -> str:
    """One row per peer, its participant named on it."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for p in ledger.peers:
        row = p.model_dump()
        writer.writerow(
            [row[c] if c not in ("compute_s", "uptime_s") else f"{row[c]:.3f}" for c in CSV_COLUMNS]
        )
    return out.getvalue()


def own_contribution(session: Session, token: str) -> OwnContribution:
    """What the holder of a peer's view link may see: that peer, its participant, its rank."""
    account = session.scalar(sa.select(PeerLedger).where(PeerLedger.view_token_hash == token_hash(token)))
    if account is None:
        raise NotFound("no contribution behind this link")
    run = session.get_one(Run, account.run_id)
    ledger = run_ledger(session, run)
    peer = next(p for p in ledger.peers if p.peer_id == account.peer_id)
    rank = next(i for i, p in enumerate(ledger.participants, 1) if p.participant_id == peer.participant_id)
    return OwnContribution(
        run_id=run.id,
        run_name=run.name,
        run_samples_counted=ledger.samples_counted,
        peer=peer,
        participant=ledger.participants[rank - 1],
        rank=rank,
        participants=len(ledger.participants),
    )
