"""Peers must not be able to lie the run into the ground.

The attacker registers with a join token like anyone and then speaks the control channel's raw JSON
from a plain websocket client; an honest swarm trains alongside. Each lie is refused with a clear
close reason, and the honest run keeps stepping with balanced books and nothing of the attacker's counted.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from launch.local_swarm import LocalSwarm
from swarmhub.wire import (
    DATA_PLANE_VERSION,
    AveragingDone,
    MicrobatchDone,
    NoWork,
    StageReady,
    StepBarrier,
    SwarmView,
    WorkGrant,
    WorkRequest,
)
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S, assert_books_balance, wait_until

POLICY_VIOLATION = 1008


def _attacker(swarm: LocalSwarm, name: str) -> tuple[ClientConnection, int]:
    registration = {
        "join_token": swarm.token,
        "listen_port": 9,
        "announce": "127.0.0.1:9",  # nothing listens there: it can only ever be a trainer
        "device": "cpu",
        "data_plane_version": DATA_PLANE_VERSION,
        "throughput": 1.0,
        "name": name,
    }
    registered = httpx.post(f"{swarm.url}/api/peers/register", json=registration, timeout=30).json()
    channel = connect(swarm.url.replace("http", "ws") + "/ws/peer", open_timeout=30)
    channel.send(
        json.dumps(
            {"type": "hello", "peer_id": registered["peer_id"], "credential": registered["credential"]}
        )
    )
    return channel, registered["peer_id"]


def _closed_with(channel: ClientConnection, frame: dict[str, Any]) -> tuple[int | None, str]:
    """Send a raw frame and read until the coordinator closes the channel."""
    channel.send(json.dumps(frame).replace('"__inf__"', "Infinity").replace('"__nan__"', "NaN"))
    try:
        while True:
            channel.recv(timeout=30)
    except ConnectionClosed as closed:
        assert closed.rcvd is not None, "the coordinator never closed the channel"
        return closed.rcvd.code, closed.rcvd.reason
    except TimeoutError:
        pytest.fail(f"the coordinator did not close the channel after {frame}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_absurd_numbers_are_refused_at_the_wire_and_the_honest_run_goes_on() -> None:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="lies", rebalance=False, **DEMO_RUN)
        for stage in (0, 1):
            swarm.start_peer("--stage", str(stage))
        wait_until("a first step", lambda: swarm.steps(run["id"]), WAIT_S)

        lies = {
            "infinite throughput": {
                "type": "heartbeat",
                "throughput": "__inf__",
                "queue_length": 0,
                "samples_done": 0,
            },
            "a queue of 1e23": {
                "type": "heartbeat",
                "throughput": 1.0,
                "queue_length": 1e23,
                "samples_done": 0,
            },
            "a NaN loss": {
                "type": "microbatch_done",
                "step": 0,
                "microbatch_id": "x",
                "samples": 1,
                "loss": "__nan__",
            },
        }
        for what, frame in lies.items():
            channel, _ = _attacker(swarm, f"liar-{len(what)}")
            code, reason = _closed_with(channel, frame)
            assert code == POLICY_VIOLATION and reason.startswith("invalid frame"), (what, code, reason)

        # A made-up report against an honest stage peer evicts nobody: one view, and the coordinator's
        # own probe of the target answers.
        channel, attacker_id = _attacker(swarm, "slanderer")
        honest = [p for p in swarm.peer_rows(run["id"]) if p["name"].startswith("local-")]
        for peer in honest:
            channel.send(json.dumps({"type": "work_request"}))
            channel.send(
                json.dumps({"type": "peer_unreachable", "peer_id": peer["id"], "reason": "trust me"})
            )
        before = len(swarm.steps(run["id"]))
        wait_until("three more steps", lambda: len(swarm.steps(run["id"])) >= before + 3, WAIT_S)
        channel.close()

        steps = swarm.steps(run["id"])
        events = swarm.events(run["id"])
        peers = {p["id"]: p for p in swarm.peer_rows(run["id"])}
        # Every dashboard number is plain JSON (Infinity would break the browser's JSON.parse).
        detail = httpx.get(f"{swarm.url}/api/runs/{run['id']}/peers", headers=swarm.client.headers).text
        assert "Infinity" not in detail and "NaN" not in detail

    assert_books_balance(steps, events, DEMO_RUN["num_stages"])
    assert all(peers[p["id"]]["state"] == "active" for p in honest)
    assert not [e for e in events if e["kind"] == "peer_lost" and e["peer_id"] in {p["id"] for p in honest}]
    assert peers[attacker_id]["stage"] is None  # it never served anything


def test_a_member_lying_about_its_gradient_norm_is_removed_and_the_step_goes_by_the_others(
    client, owner_headers, run_id, connect_peer
):
    # Three members of stage 0 and one of stage 1, all ready, in a run that keeps them where they are.
    run_id = client.post(
        "/api/runs", json={"name": "norms", "rebalance": False}, headers=owner_headers
    ).json()["id"]
    members = [connect_peer(run_id=run_id, requested_stage=0) for _ in range(3)]
    last = connect_peer(run_id=run_id, requested_stage=1)
    for peer in (*members, last):
        peer.send(StageReady(stage=peer.stage, step=0, origin="initialized"))
    trainer = members[0]
    ids = []
    while True:
        trainer.send(WorkRequest())
        grant = trainer.receive(timeout=10)
        while isinstance(grant, SwarmView | StepBarrier):
            grant = trainer.receive(timeout=10)
        if isinstance(grant, NoWork):
            break
        assert isinstance(grant, WorkGrant)
        ids.append(grant.microbatch_id)
        trainer.send(
            MicrobatchDone(step=0, microbatch_id=grant.microbatch_id, samples=grant.samples, loss=2.0)
        )
    group = sorted(p.peer_id for p in members)
    liar = members[2]
    for peer in members:
        norm = 1e29 if peer is liar else 4.0
        peer.send(
            AveragingDone(step=0, attempt=0, stage=0, contributors=group, counted=ids, grad_sum_norm_sq=norm)
        )
    closed = liar.expect_close(skip=(SwarmView, StepBarrier))
    assert closed.code == 4001 and "gradient norm" in closed.reason

    def liar_state() -> str:
        rows = client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()
        return next(p for p in rows if p["id"] == liar.peer_id)["state"]

    # The channel is closed first; the departure's row is written right after.
    wait_until("the liar's row to say kicked", lambda: liar_state() == "kicked", 10)
    events = client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()
    removed = [e for e in events if e["peer_id"] == liar.peer_id and e["kind"] == "peer_kicked"]
    assert removed and "faulty" in removed[0]["message"]
    # The honest members average again without the liar's share: a new attempt of the same step.
    retry = members[0].expect(StepBarrier)
    while retry.attempt == 0:
        retry = members[0].expect(StepBarrier)
    assert (retry.step, retry.attempt, [p.peer_id for p in retry.group]) == (0, 1, group[:2])
