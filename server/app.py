"""The coordinator application: `create_app()` for uvicorn and tests."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from server.checkpoints import CheckpointStore
from server.db import make_engine, make_session_factory, upgrade_database
from server.errors import install_error_handlers
from server.feed import FeedHub
from server.live import LiveSwarm
from server.metrics import HttpMetricsMiddleware, Metrics
from server.routes import auth, checkpoints, feed, peers, presets, runs, system, tokens
from swarmhub.settings import ServerSettings

REPO_FRONTEND = Path(__file__).resolve().parent.parent / "frontend" / "dist"
PACKAGED_FRONTEND = Path(__file__).resolve().parent / "static"


def _operation_id(route: APIRoute) -> str:
    # Route function names are unique, and read well in generated clients: `create_run`, `login`.
    return route.name


def _frontend_dir(settings: ServerSettings) -> Path | None:
    for candidate in (settings.frontend_dir, REPO_FRONTEND, PACKAGED_FRONTEND):
        if candidate is not None and (candidate / "index.html").is_file():
            return candidate
    return None


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """The coordinator app; its lifespan opens the database and runs the live swarm."""
    settings = settings or ServerSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(upgrade_database, settings.database_url)
        engine = make_engine(settings.database_url)
        app.state.session_factory = make_session_factory(engine)
        live = LiveSwarm(
            session_factory=app.state.session_factory,
            settings=settings,
            feed=app.state.feed,
            metrics=app.state.metrics,
        )
        await live.start()
        app.state.live = live
        try:
            yield
        finally:
            await live.stop()
            engine.dispose()

    app = FastAPI(
        title="SwarmHub coordinator",
        version="0.1.0",
        lifespan=lifespan,
        generate_unique_id_function=_operation_id,
    )
    app.state.settings = settings
    app.state.feed = FeedHub()
    app.state.metrics = Metrics()
    app.state.checkpoints = CheckpointStore(settings.checkpoint_dir)
    install_error_handlers(app)
    app.add_middleware(HttpMetricsMiddleware, metrics=app.state.metrics)

    for module in (system, auth, presets, runs, checkpoints, tokens, peers, feed):
        app.include_router(module.router)
    # The peers' control channel is written alongside; include it once it exists.
    if importlib.util.find_spec("server.peer_channel") is not None:
        app.include_router(importlib.import_module("server.peer_channel").router)

    # Last: the dashboard catches every path the API did not claim.
    frontend = _frontend_dir(settings)
    if frontend is not None:
        app.mount("/", StaticFiles(directory=frontend, html=True), name="frontend")
    return app
