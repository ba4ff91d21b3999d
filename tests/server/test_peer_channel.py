"""The peers' control channel `/ws/peer` against the real live swarm, on SQLite and PostgreSQL.

Every test talks to the coordinator as a peer does: register over REST, say hello on the
websocket, then exchange `swarmhub.wire` frames; what it checks is what the peer receives and what
the API and /metrics show afterwards.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from server.models import Run
from swarmhub.tickets import run_ticket_public_key
from swarmhub.wire import (
    Goodbye,
    Heartbeat,
    Hello,
    Kicked,
    NoWork,
    Reachability,
    RunSpec,
    RunStatusChanged,
    StageAssignment,
    StageReady,
    SwarmView,
    Welcome,
    WorkGrant,
    WorkRequest,
)

POLICY_VIOLATION = 1008


def _peer(client, owner_headers, run_id: int, peer_id: int) -> dict[str, Any]:
    peers = client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()
    return next(p for p in peers if p["id"] == peer_id)


def _event_kinds(client, owner_headers, run_id: int, peer_id: int) -> list[str]:
    events = client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()
    return [e["kind"] for e in events if e["peer_id"] == peer_id]


def _metric(client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not in /metrics")


def _send_raw(channel, frame: str | bytes) -> None:
    if isinstance(frame, bytes):
        channel.ws.send_bytes(frame)
    else:
        channel.ws.send_text(frame)


# ---- refusals ------------------------------------------------------------------------------


def test_a_bad_credential_is_refused_with_1008(connect_peer):
    peer_id, credential = connect_peer.register()
    for hello in (
        Hello(peer_id=peer_id, credential="not the credential"),
        Hello(peer_id=peer_id + 1000, credential=credential),
    ):
        channel = connect_peer.open()
        channel.send(hello)
        closed = channel.expect_close(skip=())
        assert (closed.code, closed.reason) == (POLICY_VIOLATION, "unknown peer or bad credential")


def test_the_first_frame_must_be_a_hello(connect_peer):
    channel = connect_peer.open()
    channel.send(Heartbeat(throughput=1.0, queue_length=0, samples_done=0))
    closed = channel.expect_close(skip=())
    assert (closed.code, closed.reason) == (POLICY_VIOLATION, "first frame must be a hello")


@pytest.mark.parametrize(
    "frame", ["{not json", "[]", '{"type": "hello"}', '{"type": "launch"}', b"\x00binary"]
)
def test_a_malformed_first_frame_is_refused_with_1008(connect_peer, frame):
    channel = connect_peer.open()
    _send_raw(channel, frame)
    closed = channel.expect_close(skip=())
    assert closed.code == POLICY_VIOLATION
    assert closed.reason.startswith("first frame must be a valid hello"), closed.reason


@pytest.mark.parametrize("frame", ["{not json", '{"type": "heartbeat", "throughput": -1}', b"\x00binary"])
def test_a_malformed_frame_after_the_hello_closes_the_channel(
    client, owner_headers, run_id, connect_peer, eventually, frame
):
    peer = connect_peer()
    _send_raw(peer, frame)
    closed = peer.expect_close()
    assert closed.code == POLICY_VIOLATION and closed.reason.startswith("invalid frame"), closed.reason
    eventually(lambda: _peer(client, owner_headers, run_id, peer.peer_id)["state"] == "lost", "peer is lost")
    assert _event_kinds(client, owner_headers, run_id, peer.peer_id)[-1] == "peer_lost"


def test_a_kicked_peer_is_told_and_its_hello_is_refused(client, admin_headers, connect_peer):
    peer = connect_peer()
    response = client.post(
        f"/api/peers/{peer.peer_id}/kick", json={"reason": "too slow"}, headers=admin_headers
    )
    assert response.status_code == 200, response.text
    assert peer.expect(Kicked).reason == "too slow"
    closed = peer.expect_close(skip=())
    assert (closed.code, closed.reason) == (POLICY_VIOLATION, "removed: too slow")

    again = connect_peer.open()
    again.send(Hello(peer_id=peer.peer_id, credential=peer.credential))
    refused = again.expect_close(skip=())
    assert (refused.code, refused.reason) == (POLICY_VIOLATION, "unknown peer or bad credential")


def test_a_frame_in_flight_when_the_peer_is_kicked_is_harmless(
    client, admin_headers, owner_headers, run_id, connect_peer, eventually
):
    """A kicked peer's heartbeat can cross the coordinator's close; the channel just ends."""
    peer = connect_peer()
    assert client.post(f"/api/peers/{peer.peer_id}/kick", headers=admin_headers).status_code == 200
    peer.expect(Kicked)
    assert peer.expect_close(skip=()).code == POLICY_VIOLATION
    peer.send(Heartbeat(throughput=1.0, queue_length=0, samples_done=0))
    peer.send(WorkRequest())
    peer.disconnect()
    other = connect_peer()  # the coordinator still serves the run
    assert other.frames[0].peer_id == other.peer_id
    assert _peer(client, owner_headers, run_id, peer.peer_id)["state"] == "kicked"
    eventually(lambda: _metric(client, "swarmhub_peers_connected") == 1.0, "one peer connected")


def test_peers_of_archived_runs_are_refused(client, owner_headers, run_id, connect_peer):
    peer_id, credential = connect_peer.register()
    assert client.post(f"/api/runs/{run_id}/archive", headers=owner_headers).status_code == 200
    channel = connect_peer.open()
    channel.send(Hello(peer_id=peer_id, credential=credential))
    closed = channel.expect_close(skip=())
    assert (closed.code, closed.reason) == (POLICY_VIOLATION, f"run {run_id} is archived")


# ---- joining -------------------------------------------------------------------------------


def first_address(client, owner_headers, run_id) -> str:
    return client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()[0]["address"]


def test_a_peer_the_coordinator_cannot_reach_trains_only(client, owner_headers, run_id, connect_peer):
    serving = connect_peer()
    peer_id, credential = connect_peer.register(announce="127.0.0.1:1")  # nothing listens on port 1
    channel = connect_peer.open()
    channel.send(Hello(peer_id=peer_id, credential=credential))
    channel.expect(Welcome)
    channel.expect(RunStatusChanged)
    notice = channel.expect(Reachability)
    assert not notice.reachable and notice.address == "127.0.0.1:1"
    assert "your port 1 is not reachable from the coordinator" in notice.detail
    row = next(
        p for p in client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json() if p["id"] == peer_id
    )
    assert (row["state"], row["stage"], row["reachable"]) == ("active", None, False)
    events = client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()
    assert [e["peer_id"] for e in events if e["kind"] == "peer_trainer_only"] == [peer_id]
    # Never a stage, but it trains: once the other stage is served it is granted microbatches.
    other = connect_peer()
    for peer in (serving, other):
        peer.send(StageReady(stage=peer.stage, step=0, origin="initialized"))
    channel.send(WorkRequest())
    assert isinstance(channel.expect(WorkGrant, skip=(SwarmView,)), WorkGrant)


def test_after_the_hello_a_peer_gets_the_run_its_status_and_a_stage(
    app, client, owner_headers, run_id, connect_peer
):
    first = connect_peer(name="asks-for-1", requested_stage=1)
    welcome, status, reachability, assignment = first.frames
    # The coordinator dialled the peer's data plane where it said it listens, and it answered as itself.
    assert reachability.reachable and reachability.address == first_address(client, owner_headers, run_id)
    assert isinstance(welcome, Welcome) and welcome.peer_id == first.peer_id and welcome.step == 0
    run = client.get(f"/api/runs/{run_id}", headers=owner_headers).json()
    assert welcome.run == RunSpec.model_validate(run | {"run_id": run_id})
    with app.state.session_factory() as session:
        secret = session.get_one(Run, run_id).data_key
    # The run's public ticket key, never its secret: a peer can check tickets but not make them.
    assert welcome.data_key == run_ticket_public_key(secret) and secret not in welcome.model_dump_json()
    assert status == RunStatusChanged(status="active")
    # It asked for stage 1: the policy would have picked the empty stage 0, the request wins.
    assert (assignment.stage, assignment.step, assignment.reason) == (1, 0, "joined")
    assert assignment.state_sources == [] and assignment.checkpoint_step is None

    # The policy fills the stage that has no peer, then the weakest one.
    second = connect_peer(name="auto")
    assert second.stage == 0
    third = connect_peer(name="auto too", throughput=50.0)
    assert third.stage == 0  # both stages hold 12.5 samples/s; ties go to the lower index

    peers = client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()
    assert {p["id"]: (p["state"], p["stage"]) for p in peers} == {
        first.peer_id: ("active", 1),
        second.peer_id: ("active", 0),
        third.peer_id: ("active", 0),
    }
    assignments = client.get(f"/api/runs/{run_id}/assignments", headers=owner_headers).json()
    assert [(a["peer_id"], a["stage"], a["reason"]) for a in assignments] == [
        (first.peer_id, 1, "joined"),
        (second.peer_id, 0, "joined"),
        (third.peer_id, 0, "joined"),
    ]
    assert _event_kinds(client, owner_headers, run_id, first.peer_id) == [
        "peer_registered",
        "peer_joined",
        "stage_assigned",
    ]
    assert _metric(client, "swarmhub_peers_connected") == 3.0


def test_a_peer_of_a_paused_run_is_told_it_is_paused(client, owner_headers, run_id, connect_peer):
    assert client.post(f"/api/runs/{run_id}/pause", headers=owner_headers).status_code == 200
    peer = connect_peer()
    assert peer.frames[1] == RunStatusChanged(status="paused")
    peer.send(WorkRequest())
    assert peer.expect(NoWork).reason == "run is paused"


def test_heartbeats_are_counted_in_metrics(client, connect_peer, eventually):
    peer = connect_peer()
    assert _metric(client, "swarmhub_heartbeats_total") == 0.0
    for samples in (8, 16):
        peer.send(Heartbeat(throughput=20.0, queue_length=1, samples_done=samples))
    eventually(lambda: _metric(client, "swarmhub_heartbeats_total") == 2.0, "two heartbeats counted")


def test_measured_link_rates_reach_the_api(client, owner_headers, run_id, connect_peer, eventually):
    peer = connect_peer()
    other = connect_peer()
    peer.send(Heartbeat(throughput=20.0, queue_length=0, samples_done=0, links={other.peer_id: 5e6}))

    def rates() -> dict[str, float] | None:
        listed = client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()
        mine = next(p for p in listed if p["id"] == peer.peer_id)
        return mine["link_rates"] or None

    assert eventually(rates, "the heartbeat's link rates written") == {str(other.peer_id): 5e6}


def test_a_ready_peer_appears_in_the_swarm_view(api, connect_peer):
    peer = connect_peer()
    peer.send(StageReady(stage=peer.stage, step=0, origin="initialized"))
    view = peer.expect(SwarmView, skip=())
    # Under load a view the coordinator sends on its own (a refresh, or one owed since a join) can go
    # out before it has taken in StageReady, and lists nobody (a fast-suite failure of CI,
    # 2026-12-05); the first view that lists anyone must list this peer alone.
    while not view.peers:
        view = peer.expect(SwarmView, skip=())
    assert view.step == 0
    assert [(p.peer_id, p.stage, p.address, p.throughput) for p in view.peers] == [
        (peer.peer_id, peer.stage, api.responder.address, 12.5)
    ]
    # A second peer sees both once it is ready; the first is told too.
    other = connect_peer()
    other.send(StageReady(stage=other.stage, step=0, origin="initialized"))
    for channel in (other, peer):
        view = channel.expect(SwarmView, skip=())
        assert sorted((p.peer_id, p.stage) for p in view.peers) == [(peer.peer_id, 0), (other.peer_id, 1)]


def test_stage_ready_for_another_step_means_copying_again(connect_peer):
    peer = connect_peer()
    peer.send(StageReady(stage=peer.stage, step=3, origin="copied"))
    again = peer.expect(StageAssignment)
    assert (again.stage, again.step, again.reason) == (peer.stage, 0, "state was ahead; copying again")
    # Not ready: no stage-0 peer is routable, so the trainer gets no work.
    peer.send(WorkRequest())
    assert peer.expect(NoWork).reason == "stage 0 has no ready peer"


# ---- leaving -------------------------------------------------------------------------------


@pytest.mark.server_settings(heartbeat_timeout_s=0.5, heartbeat_interval_s=0.1)
def test_a_silent_peer_is_marked_lost_after_the_heartbeat_timeout(
    client, owner_headers, run_id, connect_peer, eventually
):
    peer = connect_peer()
    closed = peer.expect_close()
    assert (closed.code, closed.reason) == (1001, "heartbeat timeout")
    eventually(lambda: _peer(client, owner_headers, run_id, peer.peer_id)["state"] == "lost", "peer is lost")
    events = client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()
    lost = [e for e in events if e["kind"] == "peer_lost" and e["peer_id"] == peer.peer_id]
    assert len(lost) == 1 and "no heartbeat for 0.5s" in lost[0]["message"]
    assert lost[0]["data"] == {"stage": peer.stage}
    assert _metric(client, "swarmhub_peers_connected") == 0.0


@pytest.mark.server_settings(heartbeat_timeout_s=2.0, heartbeat_interval_s=0.1)
def test_a_heartbeating_peer_is_not_lost(client, owner_headers, run_id, connect_peer):
    peer = connect_peer()
    # Three timeouts' worth of heartbeats; each round trip (WorkRequest -> NoWork) proves it was read.
    # The timeout is long beside the 0.2 s between heartbeats: with 0.5 s, one round trip slower than
    # 0.3 s on a loaded machine (PostgreSQL, CI) lost the peer.
    until = time.monotonic() + 3 * 2.0
    while time.monotonic() < until:
        peer.send(Heartbeat(throughput=1.0, queue_length=0, samples_done=0))
        peer.send(WorkRequest())
        # The peer was assigned a stage but never said it is ready.
        assert peer.expect(NoWork) == NoWork(step=0, reason="stage 0 has no ready peer")
        time.sleep(0.2)
    assert _peer(client, owner_headers, run_id, peer.peer_id)["state"] == "active"


def test_goodbye_leaves_the_run(client, owner_headers, run_id, connect_peer, eventually):
    peer = connect_peer()
    peer.send(Goodbye())
    eventually(lambda: _peer(client, owner_headers, run_id, peer.peer_id)["state"] == "left", "peer left")
    assert _event_kinds(client, owner_headers, run_id, peer.peer_id)[-1] == "peer_left"
    assert _peer(client, owner_headers, run_id, peer.peer_id)["left_at"] is not None
    assert _metric(client, "swarmhub_peers_connected") == 0.0


def test_a_vanished_socket_is_a_lost_peer(client, owner_headers, run_id, connect_peer, eventually):
    peer = connect_peer()
    peer.disconnect()
    eventually(lambda: _peer(client, owner_headers, run_id, peer.peer_id)["state"] == "lost", "peer is lost")
    assert _event_kinds(client, owner_headers, run_id, peer.peer_id)[-1] == "peer_lost"


# ---- work ----------------------------------------------------------------------------------


def test_work_is_granted_once_every_stage_has_a_ready_peer(connect_peer):
    first = connect_peer()
    assert first.stage == 0
    first.send(WorkRequest())
    assert first.expect(NoWork) == NoWork(step=0, reason="stage 0 has no ready peer")
    first.send(StageReady(stage=0, step=0, origin="initialized"))
    first.send(WorkRequest())
    assert first.expect(NoWork) == NoWork(step=0, reason="stage 1 has no ready peer")

    second = connect_peer()
    assert second.stage == 1
    second.send(WorkRequest())
    assert second.expect(NoWork).reason == "stage 1 has no ready peer"  # assigned, not yet ready
    second.send(StageReady(stage=1, step=0, origin="initialized"))
    second.expect(SwarmView, skip=())

    grants = []
    for channel in (first, second, first, second, first, second, first):
        channel.send(WorkRequest())
        grants.append(channel.expect(WorkGrant))
    # The step opens with a quarter-size microbatch and its tail halves (server/policies/step_book.py
    # grant_size).
    assert [(g.step, g.first_sample, g.samples) for g in grants] == [
        (0, 0, 2),
        (0, 2, 8),
        (0, 10, 8),
        (0, 18, 8),
        (0, 26, 3),
        (0, 29, 2),
        (0, 31, 1),
    ]
    assert len({g.microbatch_id for g in grants}) == 7
    # The run's target batch (32 samples) is all in flight: no more work this step.
    first.send(WorkRequest())
    assert first.expect(NoWork) == NoWork(step=0, reason="step 0 has all its microbatches")


# ---- reconnecting --------------------------------------------------------------------------


def test_reconnecting_with_the_same_credential_replaces_the_old_channel(
    client, owner_headers, run_id, connect_peer, eventually
):
    old = connect_peer()
    old.send(StageReady(stage=old.stage, step=0, origin="initialized"))
    old.expect(SwarmView, skip=())

    new = connect_peer.hello(old.peer_id, old.credential)
    closed = old.expect_close()
    assert (closed.code, closed.reason) == (POLICY_VIOLATION, "replaced by a newer channel of the same peer")
    assert new.frames[0].peer_id == old.peer_id
    assert (new.stage, new.frames[3].reason) == (old.stage, "rejoined its stage")
    assert _metric(client, "swarmhub_peers_connected") == 1.0

    # The new channel is the live one: it has to be ready again, and it is served.
    new.send(WorkRequest())
    assert new.expect(NoWork).reason == "stage 0 has no ready peer"
    new.send(Heartbeat(throughput=3.0, queue_length=0, samples_done=0))
    old.disconnect()  # the old socket going away does not take the peer with it
    new.send(WorkRequest())
    new.expect(NoWork)
    assert _peer(client, owner_headers, run_id, old.peer_id)["state"] == "active"
    assert "peer_lost" not in _event_kinds(client, owner_headers, run_id, old.peer_id)


@pytest.mark.server_settings(heartbeat_interval_s=5.0, heartbeat_timeout_s=30.0)
def test_the_welcome_carries_the_coordinators_heartbeat_interval(connect_peer):
    peer_id, credential = connect_peer.register()
    channel = connect_peer.open()
    channel.send(Hello(peer_id=peer_id, credential=credential))
    assert channel.expect(Welcome).heartbeat_interval_s == 5.0
