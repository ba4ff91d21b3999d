"""The coordinator application: `create_app()` for uvicorn and tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import FrameType

import anyio
import uvicorn
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from server.checkpoints import routes as checkpoints
from server.checkpoints.store import CheckpointStore
from server.datasets import draft_routes as dataset_drafts
from server.datasets import routes as datasets
from server.datasets.drafts import DraftStore, utcnow
from server.datasets.store import DatasetStore
from server.db import make_engine, make_session_factory, upgrade_database
from server.errors import install_error_handlers
from server.feed import FeedHub
from server.front_door import install_front_door
from server.housekeeping import purge_periodically, recover_checkpoints
from server.ledger import routes as ledger
from server.live import LiveSwarm
from server.metrics import HttpMetricsMiddleware, Metrics
from server.peer_package import PeerPackage, find_source
from server.routes import (
    auth,
    downloads,
    feed,
    invitations,
    peer_channel,
    peers,
    presets,
    runs,
    system,
    tokens,
)
from server.security import set_hash_concurrency
from server.webhooks import routes as webhooks
from server.webhooks.dispatcher import WebhookDispatcher
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


class CoordinatorServer(uvicorn.Server):
    """uvicorn's server, which tells the live swarm it is going down as soon as a stop signal comes:
    uvicorn closes every peer's channel before the app's shutdown runs (`LiveSwarm.begin_shutdown`)."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        live: LiveSwarm | None = getattr(self.config.app.state, "live", None)
        if live is not None:
            live.begin_shutdown()
        super().handle_exit(sig, frame)


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """The coordinator app; its lifespan opens the database and runs the live swarm."""
    settings = settings or ServerSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(upgrade_database, settings.database_url)
        await anyio.to_thread.run_sync(app.state.datasets.clean_incoming)
        await anyio.to_thread.run_sync(app.state.dataset_drafts.prune, utcnow())
        engine = make_engine(settings.database_url)
        app.state.session_factory = make_session_factory(engine)
        await anyio.to_thread.run_sync(recover_checkpoints, app.state.session_factory, app.state.checkpoints)
        live = LiveSwarm(
            session_factory=app.state.session_factory,
            settings=settings,
            feed=app.state.feed,
            metrics=app.state.metrics,
        )
        await live.start()
        app.state.live = live
        # Owed deliveries (in the database) are sent from here, the first ones at once.
        dispatcher = WebhookDispatcher(app.state.session_factory, settings)
        await dispatcher.start()
        purging = asyncio.create_task(purge_periodically(app.state.session_factory, settings))
        try:
            yield
        finally:
            purging.cancel()
            await live.stop()
            await dispatcher.stop()
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
    app.state.datasets = DatasetStore(settings.dataset_dir)
    app.state.dataset_drafts = DraftStore(settings)
    app.state.peer_package = PeerPackage(find_source(settings.peer_package_source), settings.peer_package_dir)
    install_error_handlers(app)
    app.add_middleware(HttpMetricsMiddleware, metrics=app.state.metrics)
    install_front_door(app, max_body_bytes=settings.max_body_bytes)
    set_hash_concurrency(settings.password_hash_concurrency)

    for module in (
        system,
        auth,
        invitations,
        presets,
        downloads,
        runs,
        checkpoints,
        datasets,
        dataset_drafts,
        tokens,
        webhooks,
        peers,
        ledger,
        feed,
        peer_channel,
    ):
        app.include_router(module.router)

    # Last: the dashboard catches every path the API did not claim.
    frontend = _frontend_dir(settings)
    if frontend is not None:
        app.mount("/", StaticFiles(directory=frontend, html=True), name="frontend")
    return app
