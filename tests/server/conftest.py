"""An app over each database (with the real live swarm), a client, accounts, and peers connected
over the real control channel.

Helpers are fixtures (the `api` object, `connect_peer`) rather than an importable module, so the
tests work in pytest's importlib mode, where test directories are not on sys.path.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import pytest
from fastapi import FastAPI
from starlette.websockets import WebSocketDisconnect

from server.app import create_app
from swarmhub.settings import ServerSettings
from swarmhub.wire import (
    DATA_PLANE_VERSION,
    CoordinatorToPeer,
    CoordinatorToPeerMessage,
    Hello,
    Message,
    Reachability,
    RunStatusChanged,
    StageAssignment,
    SwarmView,
    Welcome,
)
from tests.server.probe_responder import ProbeResponder

if TYPE_CHECKING:
    # Imported lazily: starlette warns on import, and conftests load before that warning is filtered.
    from fastapi.testclient import TestClient
    from starlette.testclient import WebSocketTestSession

ADMIN = ("root", "correct horse battery")
FRAME_TIMEOUT_S = 5.0
"""How long a test waits for a frame the coordinator should send: a bound on waiting, so a frame
that never comes fails the test instead of hanging it."""
M = TypeVar("M", bound=Message)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "server_settings(**fields): override ServerSettings fields for this test's app"
    )


def _eventually(
    check: Callable[[], Any], what: str = "", *, timeout: float = FRAME_TIMEOUT_S, interval: float = 0.05
) -> Any:
    """Poll `check` until it returns something truthy, and return that; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"still not true after {timeout}s: {what or check}")
        time.sleep(interval)


@dataclass(eq=False)
class PeerChannel:
    """One peer's control channel (`/ws/peer`) as a real peer holds it.

    `frames` are what the coordinator sent right after the hello (Welcome, RunStatusChanged,
    StageAssignment). SwarmView frames also arrive on their own (every couple of seconds), so
    `expect` skips them unless asked for one.
    """

    ws: WebSocketTestSession
    peer_id: int
    credential: str
    frames: list[CoordinatorToPeerMessage] = field(default_factory=list)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.ws, self.peer_id, self.credential))

    @property
    def stage(self) -> int:
        return next(f.stage for f in reversed(self.frames) if isinstance(f, StageAssignment))

    def send(self, message: Message) -> None:
        self.ws.send_text(message.model_dump_json())

    def _receive(self, timeout: float) -> dict[str, Any]:
        # TestClient's own receive has no timeout; wait on its stream in its portal with one.
        # (Uses the session's private stream: there is no public receive with a timeout.)
        async def receive() -> dict[str, Any]:
            with anyio.fail_after(timeout):
                return await self.ws._send_rx.receive()

        try:
            return self.ws.portal.call(receive)
        except TimeoutError:
            pytest.fail(f"peer {self.peer_id}: no frame from the coordinator within {timeout}s")

    def receive(self, *, timeout: float = FRAME_TIMEOUT_S) -> CoordinatorToPeerMessage:
        """The next frame; raises WebSocketDisconnect if the coordinator closed the channel instead."""
        message = self._receive(timeout)
        self.ws._raise_on_close(message)
        return CoordinatorToPeer.validate_json(message["text"])

    def expect(
        self,
        kind: type[M],
        *,
        timeout: float = FRAME_TIMEOUT_S,
        skip: tuple[type[Message], ...] = (SwarmView,),
    ) -> M:
        """The next frame that is not of a `skip` kind; it must be a `kind`."""
        while True:
            frame = self.receive(timeout=timeout)
            if isinstance(frame, kind):
                return frame
            if not isinstance(frame, skip):
                pytest.fail(f"peer {self.peer_id}: expected {kind.__name__}, got {frame!r}")

    def expect_close(
        self, *, timeout: float = FRAME_TIMEOUT_S, skip: tuple[type[Message], ...] = (SwarmView,)
    ) -> WebSocketDisconnect:
        """The coordinator closes the channel (after any `skip` frames); returns code and reason."""
        while True:
            try:
                frame = self.receive(timeout=timeout)
            except WebSocketDisconnect as closed:
                return closed
            if not isinstance(frame, skip):
                pytest.fail(f"peer {self.peer_id}: expected the channel to close, got {frame!r}")

    def disconnect(self) -> None:
        """The peer's side of the socket goes away (as when its process dies)."""
        self.ws.close(1000)


class PeerConnector:
    """`connect_peer(...)`: register a peer with a join token and open its control channel."""

    def __init__(self, api: Api, owner_headers: dict[str, str], run_id: int, stack: contextlib.ExitStack):
        self._api = api
        self._owner_headers = owner_headers
        self._run_id = run_id
        self._stack = stack

    def __call__(
        self, token: str | None = None, *, run_id: int | None = None, **registration: Any
    ) -> PeerChannel:
        """A registered peer that said hello; its first frames are drained into `frames`."""
        peer_id, credential = self.register(token, run_id=run_id, **registration)
        return self.hello(peer_id, credential)

    def register(
        self, token: str | None = None, *, run_id: int | None = None, **registration: Any
    ) -> tuple[int, str]:
        if token is None:
            token = self._api.issue_token(self._owner_headers, run_id or self._run_id)["token"]
        response = self._api.client.post(
            "/api/peers/register", json=self._api.registration(token, **registration)
        )
        assert response.status_code == 201, response.text
        return response.json()["peer_id"], response.json()["credential"]

    def open(self) -> PeerChannel:
        """A bare channel that has said nothing yet."""
        return PeerChannel(self._stack.enter_context(self._api.client.websocket_connect("/ws/peer")), 0, "")

    def hello(self, peer_id: int, credential: str) -> PeerChannel:
        """Open a channel, say hello with these credentials and drain the coordinator's first frames."""
        self._api.responder.know(peer_id, credential)
        channel = self.open()
        channel.peer_id, channel.credential = peer_id, credential
        channel.send(Hello(peer_id=peer_id, credential=credential))
        channel.frames = [
            channel.expect(Welcome),
            channel.expect(RunStatusChanged),
            channel.expect(Reachability),
            channel.expect(StageAssignment),
        ]
        return channel


@dataclass
class Api:
    app: FastAPI
    client: TestClient
    responder: ProbeResponder
    """Where the fake peers' data planes answer the coordinator's reachability probe."""
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

    def registration(self, token: str, **overrides: Any) -> dict[str, Any]:
        port = int(self.responder.address.rsplit(":", 1)[1])
        body = {
            "join_token": token,
            "listen_port": port,
            "announce": self.responder.address,
            "device": "cpu",
            "data_plane_version": DATA_PLANE_VERSION,
            "throughput": 12.5,
        }
        return body | overrides


@pytest.fixture
def settings(request: pytest.FixtureRequest, database_url: str, tmp_path) -> ServerSettings:
    marker = request.node.get_closest_marker("server_settings")
    overrides = marker.kwargs if marker is not None else {}
    return ServerSettings(
        database_url=database_url,
        checkpoint_dir=tmp_path / "checkpoints",
        dataset_dir=tmp_path / "datasets",
        peer_package_dir=tmp_path / "peer-package",
        **overrides,
    )


@pytest.fixture
def app(settings: ServerSettings) -> FastAPI:
    return create_app(settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    from fastapi.testclient import TestClient

    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def api(app: FastAPI, client: TestClient, probe_responder: ProbeResponder) -> Api:
    return Api(app, client, probe_responder)


@pytest.fixture(scope="session")
def probe_responder() -> Iterator[ProbeResponder]:
    responder = ProbeResponder()
    yield responder
    responder.close()


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


@pytest.fixture
def connect_peer(api: Api, owner_headers: dict[str, str], run_id: int) -> Iterator[PeerConnector]:
    """Connects peers of `run_id` over the real control channel; their sockets close at teardown."""
    with contextlib.ExitStack() as stack:
        yield PeerConnector(api, owner_headers, run_id, stack)


@pytest.fixture
def eventually() -> Callable[..., Any]:
    """`eventually(check, what, timeout=...)`: poll until `check()` is truthy and return it, or fail.

    A bound on waiting for something the coordinator does on its own time, not a timing assertion."""
    return _eventually
