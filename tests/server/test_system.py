"""Health, Prometheus metrics, OpenAPI, and the app's lifecycle."""

from __future__ import annotations


def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_metrics_exposes_runs_peers_heartbeats_and_requests(app, client, owner_headers, run_id):
    client.post(f"/api/runs/{run_id}/pause", headers=owner_headers)
    client.post("/api/runs", json={"name": "second"}, headers=owner_headers)
    client.get(f"/api/runs/{run_id}", headers=owner_headers)
    client.get("/api/nowhere")
    app.state.live.connected = 3
    app.state.metrics.heartbeats.inc(2)
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'swarmhub_runs{status="active"} 1.0' in text
    assert 'swarmhub_runs{status="paused"} 1.0' in text
    assert 'swarmhub_runs{status="archived"} 0.0' in text
    assert "swarmhub_peers_connected 3.0" in text
    assert "swarmhub_heartbeats_total 2.0" in text
    # Labelled by route template, so ids do not create a series each.
    assert 'swarmhub_http_requests_total{method="GET",route="/api/runs/{run_id}",status="200"} 1.0' in text
    assert f"/api/runs/{run_id}" not in text
    assert 'route="unmatched",status="404"' in text


def test_each_app_has_its_own_registry(app, settings):
    from server.app import create_app

    assert create_app(settings).state.metrics.registry is not app.state.metrics.registry


def test_live_swarm_is_started_and_stopped(app):
    from fastapi.testclient import TestClient

    with TestClient(app):
        live = app.state.live
        assert live.started and not live.stopped
        assert live.session_factory is app.state.session_factory
        assert live.feed is app.state.feed and live.metrics is app.state.metrics
    assert live.stopped


def test_openapi_has_readable_operation_ids(client):
    schema = client.get("/openapi.json").json()
    ids = {op["operationId"] for path in schema["paths"].values() for op in path.values()}
    assert {"login", "create_run", "issue_token", "register_peer", "kick_peer", "healthz"} <= ids
    assert client.get("/docs").status_code == 200


def test_unknown_api_paths_are_json_404(client):
    response = client.get("/api/nothing-here")
    assert response.status_code == 404 and response.json() == {"detail": "Not Found"}


def test_the_real_live_swarm_starts_and_stops_with_the_app(settings):
    from fastapi.testclient import TestClient

    from server.app import create_app
    from server.live import LiveSwarm

    app = create_app(settings)
    with TestClient(app) as client:
        assert isinstance(app.state.live, LiveSwarm)
        assert client.get("/healthz").status_code == 200
        assert "swarmhub_peers_connected 0.0" in client.get("/metrics").text
