"""An app over each database, a client, accounts, and a stand-in for the live swarm.

Helpers are fixtures (the `api` object) rather than an importable module, so the tests work in
pytest's importlib mode, where test directories are not on sys.path.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI

from server.app import create_app
from swarmhub.settings import ServerSettings

if TYPE_CHECKING:
    # Imported lazily: starlette warns on import, and conftests load before that warning is filtered.
    from fastapi.testclient import TestClient

ADMIN = ("root", "correct horse battery")


@dataclass
class RecordingLive:
    """Stands in for LiveSwarm: the API's calls into it are what these tests check."""

    session_factory: Any
    settings: ServerSettings
    feed: Any
    metrics: Any
    started: bool = False
    stopped: bool = False
    kicked: list[tuple[int, str]] = field(default_factory=list)
    status_changes: list[tuple[int, str]] = field(default_factory=list)
    checkpoint_requests: list[int] = field(default_factory=list)
    connected: int = 0

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def connected_peer_count(self) -> int:
        return self.connected

    async def kick_peer(self, peer_id: int, reason: str) -> None:
        self.kicked.append((peer_id, reason))

    async def run_status_changed(self, run_id: int, status: str) -> None:
        self.status_changes.append((run_id, status))

    async def request_checkpoint(self, run_id: int) -> None:
        self.checkpoint_requests.append(run_id)


@dataclass
class Api:
    app: FastAPI
    client: TestClient
    admin: tuple[str, str] = ADMIN

    def create_account(self, username: str, password: str, role: str) -> None:
        from server.services.accounts import create_user

        with self.app.state.session_factory() as session:
            create_user(session, username=username, password=password, role=role)
            session.commit()

    def bearer(self, username: str, password: str) -> dict[str, str]:
        """Log in and return the Authorization header; the cookies are dropped."""
        response = self.client.post("/api/auth/login", json={"username": username, "password": password})
        assert response.status_code == 200, response.text
        self.client.cookies.clear()
        return {"Authorization": f"Bearer {response.json()['token']}"}

    def issue_token(self, headers: dict[str, str], run_id: int) -> dict[str, Any]:
        response = self.client.post(f"/api/runs/{run_id}/tokens", json={"label": "friends"}, headers=headers)
        assert response.status_code == 201, response.text
        return response.json()

    @staticmethod
    def registration(token: str, **overrides: Any) -> dict[str, Any]:
        body = {"join_token": token, "address": "127.0.0.1:7001", "device": "cpu", "throughput": 12.5}
        return body | overrides


@pytest.fixture
def settings(database_url: str, tmp_path) -> ServerSettings:
    return ServerSettings(database_url=database_url, checkpoint_dir=tmp_path / "checkpoints")


@pytest.fixture
def app(settings: ServerSettings) -> FastAPI:
    return create_app(settings, live_factory=RecordingLive)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    from fastapi.testclient import TestClient

    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def api(app: FastAPI, client: TestClient) -> Api:
    return Api(app, client)


@pytest.fixture
def admin_headers(api: Api) -> dict[str, str]:
    api.create_account(*ADMIN, "admin")
    return api.bearer(*ADMIN)


@pytest.fixture
def owner_headers(api: Api) -> dict[str, str]:
    api.create_account("alice", "alice password", "owner")
    return api.bearer("alice", "alice password")


@pytest.fixture
def run_id(client: TestClient, owner_headers: dict[str, str]) -> int:
    response = client.post("/api/runs", json={"name": "first"}, headers=owner_headers)
    assert response.status_code == 201, response.text
    return response.json()["id"]


@pytest.fixture(scope="session")
def recording_live_factory() -> type[RecordingLive]:
    return RecordingLive
