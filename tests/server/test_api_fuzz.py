"""Property test over the whole OpenAPI: no input, logged in or not, makes the coordinator fail (5xx).

Drives hypothesis directly rather than through schemathesis' pytest plugin, whose lazy loader does
not work with the pytest in use here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from server.app import create_app
from swarmhub.settings import ServerSettings
from swarmhub.wire import DATA_PLANE_VERSION

pytestmark = pytest.mark.slow

# Operations are listed from the schema alone; no database is touched to build it.
OPERATIONS = sorted(
    (method.upper(), path)
    for path, methods in create_app(ServerSettings(database_url="sqlite://")).openapi()["paths"].items()
    for method in methods
)


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory) -> Iterator[tuple[Any, dict[str, str]]]:
    """The real app, live swarm included, on SQLite with an admin, a run, a join token and a peer,
    so ids in paths often exist."""
    from fastapi.testclient import TestClient

    from server.services.accounts import create_user

    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.sqlite'}"
    checkpoints = tmp_path_factory.mktemp("fuzz-checkpoints")
    app = create_app(ServerSettings(database_url=url, checkpoint_dir=checkpoints))
    with TestClient(app) as client:
        with app.state.session_factory() as session:
            create_user(session, username="root", password="fuzzing password", role="admin")
            session.commit()
        login = client.post("/api/auth/login", json={"username": "root", "password": "fuzzing password"})
        headers = {"Authorization": f"Bearer {login.json()['token']}"}
        client.cookies.clear()
        run_id = client.post("/api/runs", json={"name": "fuzzed"}, headers=headers).json()["id"]
        join = client.post(f"/api/runs/{run_id}/tokens", headers=headers).json()["token"]
        registration = {
            "join_token": join,
            "listen_port": 7001,
            "announce": "127.0.0.1:7001",
            "device": "cpu",
            "data_plane_version": DATA_PLANE_VERSION,
            "throughput": 1.0,
        }
        assert client.post("/api/peers/register", json=registration).status_code == 201
        yield app, headers


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_server_errors(method, path, fuzz_target):
    app, admin_bearer = fuzz_target
    operation = schemathesis.openapi.from_asgi("/openapi.json", app)[path][method]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=40,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def check(case):
        for headers in (admin_bearer, {}):
            response = case.call(headers=headers)
            assert response.status_code < 500, f"{method} {case.formatted_path}: {response.text}"

    check()
