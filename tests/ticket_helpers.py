"""Data-plane tickets for tests that call peers directly, as the coordinator would issue them.

A test with access to the coordinator's database (as the coordinator's host has) reads the run's
secret data key and mints a ticket for a frame-signing key of its own; an attacker has no such
access and must get its ticket over the control channel (`tests/hostile/test_data_plane_auth.py`).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from peer.frame_auth import FrameSigner
from swarmhub.tickets import issue_ticket, run_ticket_key


def run_data_key(database: Path, run_id: int) -> str:
    with sqlite3.connect(database) as db:
        (data_key,) = db.execute("SELECT data_key FROM runs WHERE id = ?", (run_id,)).fetchone()
    return data_key


def minted_signer(data_key: str, run_id: int, peer_id: int) -> FrameSigner:
    """A fresh signing key with a ticket of the run for `peer_id` (good for the ticket lifetime)."""
    signer = FrameSigner()
    ticket = issue_ticket(
        run_ticket_key(data_key),
        run_id=run_id,
        peer_id=peer_id,
        public_key=signer.public_key,
        now=time.time(),
    )
    signer.take(ticket)
    return signer
