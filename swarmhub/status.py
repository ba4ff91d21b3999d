"""The states a run and a peer can be in, shared by the coordinator's tables, its API and the wire.

String enums: each member equals its value (`RunStatus.ACTIVE == "active"`), so rows, JSON and
code that still compare plain strings keep working, and the database columns stay strings.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    ACTIVE = "active"
    """Peers train it."""
    PAUSED = "paused"
    """Peers stay connected but get no work; an owner resumes it."""
    ARCHIVED = "archived"
    """Put away by its owner; peers leave and may not join."""
    FINISHED = "finished"
    """Reached max_steps; peers leave and may not join."""


class PeerState(StrEnum):
    JOINING = "joining"
    """Registered, control channel not yet opened (or not yet welcomed)."""
    ACTIVE = "active"
    """Connected and serving its stage."""
    LOST = "lost"
    """Stopped answering (heartbeats, channel, or reported unreachable); it may rejoin."""
    LEFT = "left"
    """Said goodbye."""
    KICKED = "kicked"
    """Removed by an admin; the same participant may register again with a join token."""
    BANNED = "banned"
    """Removed by an admin, and its name is refused in this run from now on."""
