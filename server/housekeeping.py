"""Work the coordinator does on its own: settle the checkpoint directory at start, purge stale rows."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import anyio
from sqlalchemy.orm import Session

from server.checkpoints.recovery import recover_with
from server.checkpoints.store import CheckpointStore
from server.services import accounts, login_throttle
from swarmhub.settings import ServerSettings

log = logging.getLogger(__name__)

PURGE_EVERY_S = 600.0


def recover_checkpoints(factory: Callable[[], Session], store: CheckpointStore) -> None:
    done = recover_with(factory, store)
    if done.installed or done.partial_deleted or done.rows_dropped or done.steps_deleted:
        log.info(
            "checkpoints settled: %d finished uploads installed, %d partial files deleted,"
            " %d rows without their file dropped, %d stale step directories deleted",
            done.installed,
            done.partial_deleted,
            len(done.rows_dropped),
            len(done.steps_deleted),
        )


def purge_once(factory: Callable[[], Session], settings: ServerSettings) -> tuple[int, int, int]:
    """Delete expired or idle sessions, forgotten login failures and expired invitation links;
    returns (sessions, throttle rows, links)."""
    with factory() as session:
        sessions = accounts.purge_expired_sessions(session, idle_minutes=settings.session_idle_minutes)
        throttle = login_throttle.purge(session)
        links = accounts.purge_expired_invitations(session)
        session.commit()
    return sessions, throttle, links


async def purge_periodically(factory: Callable[[], Session], settings: ServerSettings) -> None:
    while True:
        try:
            await anyio.to_thread.run_sync(purge_once, factory, settings)
        except Exception:  # a database hiccup must not end the loop; the next round tries again
            log.exception("purging expired sessions failed")
        await asyncio.sleep(PURGE_EVERY_S)
