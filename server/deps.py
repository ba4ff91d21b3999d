"""Request-scoped dependencies shared by the routes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlalchemy.orm import Session

from server.feed import FeedHub
from server.live import LiveSwarm
from swarmhub.settings import ServerSettings


def get_session(request: Request) -> Iterator[Session]:
    # The route commits; whatever it leaves uncommitted (an error) is rolled back on close.
    with request.app.state.session_factory() as session:
        yield session


def get_settings(request: Request) -> ServerSettings:
    return request.app.state.settings


def get_feed(request: Request) -> FeedHub:
    return request.app.state.feed


def get_live(request: Request) -> LiveSwarm:
    """The live swarm. It lives on the event loop: sync routes call it through `anyio.from_thread.run`."""
    return request.app.state.live


MAX_ID = 2**31 - 1
"""Ids are 32-bit on both databases; larger ones cannot exist and would overflow the driver."""

RunId = Annotated[int, Path(ge=1, le=MAX_ID)]
PeerId = Annotated[int, Path(ge=1, le=MAX_ID)]
TokenId = Annotated[int, Path(ge=1, le=MAX_ID)]

SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
FeedDep = Annotated[FeedHub, Depends(get_feed)]
LiveDep = Annotated[LiveSwarm, Depends(get_live)]
