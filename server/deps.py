"""Request-scoped dependencies shared by the routes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from server.feed import FeedHub
from swarmhub.settings import ServerSettings


def get_session(request: Request) -> Iterator[Session]:
    # The route commits; whatever it leaves uncommitted (an error) is rolled back on close.
    with request.app.state.session_factory() as session:
        yield session


def get_settings(request: Request) -> ServerSettings:
    return request.app.state.settings


def get_feed(request: Request) -> FeedHub:
    return request.app.state.feed


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
FeedDep = Annotated[FeedHub, Depends(get_feed)]
