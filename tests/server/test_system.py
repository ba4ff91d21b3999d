"""Health, Prometheus metrics, OpenAPI, and the app's lifecycle."""

from __future__ import annotations

from swarmhub.wire import DATA_PLANE_VERSION, Heartbeat


def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_metrics_exposes_runs_peers_heartbeats_and_requests(
    client, owner_headers, run_id, connect_peer, eventually
):
    peers = [connect_peer() for i in range(4)]
    peers[0].send(Heartbeat(throughput=3.0, queue_length=0, samples_done=8))
    peers[1].send(Heartbeat(throughput=4.0, queue_length=1, samples_done=16))
    peers[3].disconnect()
    client.post(f"/api/runs/{run_id}/pause", headers=owner_headers)
    client.post("/api/runs", json={"name": "second"}, headers=owner_headers)
    client.get(f"/api/runs/{run_id}", headers=owner_headers)
    client.get("/api/nowhere")
    # Heartbeats and the disconnect are handled on the coordinator's own time: wait for them.
    eventually(
        lambda: "swarmhub_heartbeats_total 2.0" in client.get("/metrics").text, "both heartbeats counted"
    )
    eventually(lambda: "swarmhub_peers_connected 3.0" in client.get("/metrics").text, "three channels open")
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'swarmhub_runs{status="active"} 1.0' in text
    assert 'swarmhub_runs{status="paused"} 1.0' in text
    assert 'swarmhub_runs{status="archived"} 0.0' in text
    assert "swarmhub_peers_connected 3.0" in text
    assert "swarmhub_heartbeats_total 2.0" in text
    assert 'swarmhub_http_requests_total{method="POST",route="/api/peers/register",status="201"} 4.0' in text
    # Labelled by route template, so ids do not create a series each.
    assert 'swarmhub_http_requests_total{method="GET",route="/api/runs/{run_id}",status="200"} 1.0' in text
    assert f"/api/runs/{run_id}" not in text
    assert 'route="unmatched",status="404"' in text


def test_each_app_has_its_own_registry(app, settings):
    from server.app import create_app

    assert create_app(settings).state.metrics.registry is not app.state.metrics.registry


def test_openapi_has_readable_operation_ids(client):
    schema = client.get("/openapi.json").json()
    ids = {op["operationId"] for path in schema["paths"].values() for op in path.values()}
    assert {"login", "create_run", "issue_token", "register_peer", "kick_peer", "healthz"} <= ids
    assert client.get("/docs").status_code == 200


def test_unknown_api_paths_are_json_404(client):
    response = client.get("/api/nothing-here")
    assert response.status_code == 404 and response.json() == {"detail": "Not Found"}


def test_the_live_swarm_starts_and_stops_with_the_app(settings):
    from fastapi.testclient import TestClient

    from server.app import create_app
    from server.live import LiveSwarm
    from server.models import Peer
    from server.services.accounts import create_user

    app = create_app(settings)
    with TestClient(app) as client:
        assert isinstance(app.state.live, LiveSwarm)
        assert client.get("/healthz").status_code == 200
        assert "swarmhub_peers_connected 0.0" in client.get("/metrics").text
        with app.state.session_factory() as session:
            create_user(session, username="alice", password="alice password", role="owner")
            session.commit()
        login = client.post("/api/auth/login", json={"username": "alice", "password": "alice password"})
        client.cookies.clear()
        owner = {"Authorization": f"Bearer {login.json()['token']}"}
        run_id = client.post("/api/runs", json={"name": "lifecycle"}, headers=owner).json()["id"]
        token = client.post(f"/api/runs/{run_id}/tokens", headers=owner).json()["token"]
        registration = {
            "join_token": token,
            "listen_port": 7001,
            "announce": "127.0.0.1:7001",
            "device": "cpu",
            "data_plane_version": DATA_PLANE_VERSION,
            "throughput": 1.0,
        }
        peer_id = client.post("/api/peers/register", json=registration).json()["peer_id"]
    # Stopped cleanly (no error on shutdown). Now say the coordinator had died with that peer
    # connected: the database still calls it active. A coordinator starting on it marks it lost.
    with app.state.session_factory() as session:
        session.get_one(Peer, peer_id).state = "active"
        session.commit()
    again = create_app(settings)
    with TestClient(again) as client:
        assert isinstance(again.state.live, LiveSwarm) and again.state.live is not app.state.live
        peers = client.get(f"/api/runs/{run_id}/peers", headers=owner).json()
        assert [(p["id"], p["state"]) for p in peers] == [(peer_id, "lost")]
        assert "swarmhub_peers_connected 0.0" in client.get("/metrics").text
