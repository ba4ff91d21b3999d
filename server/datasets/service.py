"""Datasets: recording packed uploads, listing them, and who may read or use which.

Readers: the peers of runs that train on the dataset, and owners who hold a row for it (admins
read every one). Any signed-in user and any peer whose run uses it may read the bundled corpus.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import Forbidden, NotFound, Unauthorized, Unprocessable
from server.models import Dataset, Run, User
from server.services.peers import authenticate_peer
from swarmhub.datasets import BUNDLED_DATASET, DatasetManifest


def record(session: Session, owner: User, *, name: str, manifest: DatasetManifest, files: int) -> Dataset:
    """The owner's row for this manifest: a new one, or the one they already have for the same bytes."""
    digest = manifest.id
    row = session.scalar(sa.select(Dataset).where(Dataset.owner_id == owner.id, Dataset.digest == digest))
    if row is None:
        row = Dataset(
            digest=digest,
            owner_id=owner.id,
            name=name,
            bytes=manifest.bytes,
            shards=len(manifest.shards),
            files=files,
        )
        session.add(row)
        session.flush()
    return row


def visible(session: Session, user: User) -> list[Dataset]:
    query = sa.select(Dataset).order_by(Dataset.id.desc())
    if user.role != "admin":
        query = query.where(Dataset.owner_id == user.id)
    return list(session.scalars(query))


def check_usable(session: Session, user: User, dataset: str) -> None:
    """A run this user creates may name `dataset` only if they (or, for an admin, anyone) uploaded it."""
    if dataset == BUNDLED_DATASET:
        return
    query = sa.select(Dataset.id).where(Dataset.digest == dataset)
    if user.role != "admin":
        query = query.where(Dataset.owner_id == user.id)
    if session.scalar(query.limit(1)) is None:
        raise Unprocessable(
            f"dataset {dataset} is not one of your datasets: upload it first (POST /api/datasets)"
        )


def check_user_may_read(session: Session, user: User, dataset: str) -> None:
    if dataset == BUNDLED_DATASET:
        return
    try:
        check_usable(session, user, dataset)
    except Unprocessable:
        raise NotFound(f"dataset {dataset} not found") from None


def check_peer_may_read(session: Session, peer_id: int, credential: str, dataset: str) -> None:
    """Only a peer whose run trains on `dataset` may read it (kicked and banned peers may not)."""
    peer = authenticate_peer(session, peer_id, credential)
    if peer is None:
        raise Unauthorized(
            "invalid peer id or credential (or the peer was kicked or banned, or its join token revoked)"
        )
    run = session.get_one(Run, peer.run_id)
    if run.dataset != dataset:
        raise Forbidden(f"peer {peer_id}'s run does not train on dataset {dataset}")
