"""Helpers for the API tests: a stand-in for the live swarm, accounts, logins, join tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from swarmhub.settings import ServerSettings

if TYPE_CHECKING:
    # Imported lazily: starlette warns on import, and conftests load before the filter is set.
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


def create_account(app: FastAPI, username: str, password: str, role: str) -> None:
    from server.services.accounts import create_user

    with app.state.session_factory() as session:
        create_user(session, username=username, password=password, role=role)
        session.commit()


def bearer(client: TestClient, username: str, password: str) -> dict[str, str]:
    response = client.post("/api/auth/login", json={"username": username, "password": password})
    assert response.status_code == 200, response.text
    client.cookies.clear()  # only the header authenticates from here on
    return {"Authorization": f"Bearer {response.json()['token']}"}


def issue_token(client: TestClient, headers: dict[str, str], run_id: int) -> dict[str, Any]:
    response = client.post(f"/api/runs/{run_id}/tokens", json={"label": "friends"}, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def registration(token: str, **overrides: Any) -> dict[str, Any]:
    body = {"join_token": token, "address": "127.0.0.1:7001", "device": "cpu", "throughput": 12.5}
    return body | overrides
