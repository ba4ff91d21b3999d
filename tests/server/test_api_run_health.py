"""A run's health in the API and the feed, against the real live swarm, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
from typing import Any

from pydantic import TypeAdapter

from server.schemas import FeedFrame
from swarmhub.wire import Heartbeat, StageAssignment, StageReady


def _run(client, headers, run_id: int) -> dict[str, Any]:
    response = client.get(f"/api/runs/{run_id}", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def _health(client, headers, run_id: int) -> dict[str, Any]:
    return _run(client, headers, run_id)["health"]


def _events(client, headers, run_id: int, kind: str) -> list[dict[str, Any]]:
    events = client.get(f"/api/runs/{run_id}/events", headers=headers).json()
    return [e for e in events if e["kind"] == kind]


def _heartbeat(client, headers, run_id: int, peer_id: int) -> str:
    peers = client.get(f"/api/runs/{run_id}/peers", headers=headers).json()
    return next(p["last_heartbeat"] for p in peers if p["id"] == peer_id)


@contextlib.contextmanager
def _feed(client, run_id, headers):
    with client.websocket_connect(f"/ws/runs/{run_id}/feed") as ws:
        ws.send_json({"type": "auth", "token": headers["Authorization"].removeprefix("Bearer ")})
        yield ws


def test_a_run_nobody_joined_waits_for_peers_and_a_paused_one_says_so(client, owner_headers, run_id):
    assert _health(client, owner_headers, run_id) == {
        "state": "waiting",
        "reason": "no peer has joined yet",
        "since": None,
        "stages": [],
    }
    (listed,) = client.get("/api/runs", headers=owner_headers).json()
    assert listed["health"]["state"] == "waiting"
    with _feed(client, run_id, owner_headers) as ws:
        assert ws.receive_json()["run"]["health"]["state"] == "waiting"
        assert client.post(f"/api/runs/{run_id}/pause", headers=owner_headers).status_code == 200
        frames = [ws.receive_json() for _ in range(3)]
        health = next(f for f in frames if f["type"] == "health")
        assert health["health"]["state"] == "paused"
        for frame in frames:
            TypeAdapter(FeedFrame).validate_python(frame)
    assert _health(client, owner_headers, run_id)["state"] == "paused"


def test_losing_a_stages_only_peer_stalls_the_run_and_its_return_recovers_it(
    client, owner_headers, run_id, connect_peer, eventually
):
    first, second = connect_peer(), connect_peer()
    assert (first.stage, second.stage) == (0, 1)
    for peer in (first, second):
        peer.send(StageReady(stage=peer.stage, step=0, origin="initialized"))
    training = eventually(
        lambda: (h := _health(client, owner_headers, run_id))["state"] == "training" and h, "training"
    )
    assert [(s["stage"], s["color"], s["ready"]) for s in training["stages"]] == [
        (0, "amber", 1),
        (1, "amber", 1),
    ]

    with _feed(client, run_id, owner_headers) as ws:
        assert ws.receive_json()["run"]["health"]["state"] == "training"
        second.disconnect()
        stalled = eventually(
            lambda: (h := _health(client, owner_headers, run_id))["state"] == "stalled" and h, "stalled"
        )
        assert stalled["reason"] == "stage 1 has no live peer"
        assert stalled["since"] is not None
        assert [s["color"] for s in stalled["stages"]] == ["amber", "red"]
        # Dashboards are told too.
        while (frame := ws.receive_json())["type"] != "health":
            pass
        assert frame["health"]["state"] == "stalled"
    (event,) = eventually(lambda: _events(client, owner_headers, run_id, "run_stalled"), "run_stalled event")
    assert event["message"] == "stalled: stage 1 has no live peer"

    back = connect_peer.hello(second.peer_id, second.credential)
    assert back.frames[-1] == StageAssignment(
        stage=1, step=0, reason="rejoined its stage", state_sources=[], checkpoint_step=None, apply=None
    )
    back.send(StageReady(stage=1, step=0, origin="initialized"))
    eventually(lambda: _health(client, owner_headers, run_id)["state"] == "training", "training again")
    (recovered,) = eventually(lambda: _events(client, owner_headers, run_id, "run_recovered"), "recovered")
    assert recovered["message"].startswith("training again after ")
    (listed,) = client.get("/api/runs", headers=owner_headers).json()
    assert listed["health"]["state"] == "training"


def test_last_heartbeat_is_kept_current_when_nothing_else_changes(
    client, owner_headers, run_id, connect_peer, eventually
):
    assert client.post(f"/api/runs/{run_id}/pause", headers=owner_headers).status_code == 200
    peer = connect_peer()
    same = Heartbeat(throughput=1.0, queue_length=0, samples_done=0)
    peer.send(same)
    admitted = _heartbeat(client, owner_headers, run_id, peer.peer_id)
    written = eventually(
        lambda: (h := _heartbeat(client, owner_headers, run_id, peer.peer_id)) != admitted and h,
        "first heartbeat written",
    )
    # A paused peer's figures stay the same; its heartbeat's time alone must still reach the API.
    peer.send(same)
    eventually(
        lambda: _heartbeat(client, owner_headers, run_id, peer.peer_id) > written,
        "a later heartbeat with the same figures written",
    )
