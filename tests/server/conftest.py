"""An app over each database, a client, an admin and an owner with a run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from api_helpers import ADMIN, RecordingLive, bearer, create_account
from fastapi import FastAPI

from server.app import create_app
from swarmhub.settings import ServerSettings

if TYPE_CHECKING:
    # Imported lazily: starlette warns on import, and conftests load before the filter is set.
    from fastapi.testclient import TestClient


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
def admin_headers(app: FastAPI, client: TestClient) -> dict[str, str]:
    create_account(app, *ADMIN, "admin")
    return bearer(client, *ADMIN)


@pytest.fixture
def owner_headers(app: FastAPI, client: TestClient) -> dict[str, str]:
    create_account(app, "alice", "alice password", "owner")
    return bearer(client, "alice", "alice password")


@pytest.fixture
def run_id(client: TestClient, owner_headers: dict[str, str]) -> int:
    response = client.post("/api/runs", json={"name": "first"}, headers=owner_headers)
    assert response.status_code == 201, response.text
    return response.json()["id"]
