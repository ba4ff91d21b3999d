"""Hostile owners and peers against participants' machines: absurd run sizes, implausible data-plane
addresses, dialling outside the run, and checkpoint uploads a peer was not asked for."""

from __future__ import annotations

import asyncio
import socket

import pytest
import torch

from launch.local_swarm import LocalSwarm
from peer.model import state_from_bytes, state_to_bytes
from peer.transport import FramePool, FrameServer, TransportError, UploadPacer
from server.models import Run
from server.services.peers import implausible_host
from swarmhub.presets import PRESETS
from swarmhub.resources import estimate_memory
from swarmhub.wire import CheckpointRequest, PeerEndpoint, RunStatusChanged, StageReady, SwarmView
from tests.training.swarm_helpers import wait_until


def test_a_run_asking_for_absurd_activation_sizes_is_refused_at_the_api(client, owner_headers):
    # xl, 4096-sample microbatches of 1024 tokens: 8.6e9 activation elements, 32 GiB per tensor.
    absurd = {"name": "greedy", "model_preset": "xl", "microbatch_size": 4096, "target_batch_size": 4096}
    response = client.post("/api/runs", json={**absurd, "seq_len": 1024}, headers=owner_headers)
    assert response.status_code == 422, response.text
    assert "microbatch_size x seq_len x d_model is 4096 x 1024 x 2048" in response.text
    assert "over the limit" in response.text
    assert client.get("/api/runs", headers=owner_headers).json() == []
    # The same preset at a size peers can hold is accepted.
    fine = {**absurd, "microbatch_size": 8, "target_batch_size": 64, "seq_len": 1024}
    assert client.post("/api/runs", json=fine, headers=owner_headers).status_code == 201


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("169.254.169.254", "metadata-service"),
        ("fd00:ec2::254", "metadata-service"),
        ("::ffff:169.254.169.254", "metadata-service"),
        ("metadata.google.internal", "metadata-service"),
        ("169.254.10.1", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("127.0.0.1", None),
        ("::1", None),
        ("10.1.2.3", None),
        ("203.0.113.7", None),
        ("2001:db8::7", None),
        ("peer-3.example.org", None),
    ],
)
def test_announced_address_plausibility(host, why):
    found = implausible_host(host)
    assert (found is None) if why is None else (why in found)


def test_an_announce_of_the_metadata_service_is_refused(api, client, owner_headers, run_id, connect_peer):
    honest = connect_peer()
    token = api.issue_token(owner_headers, run_id)["token"]
    for announce in ("169.254.169.254:80", "[fd00:ec2::254]:80", "0.0.0.0:9000", "[fe80::1]:9000"):
        response = client.post("/api/peers/register", json=api.registration(token, announce=announce))
        assert response.status_code == 422, response.text
        assert "refusing data-plane address" in response.json()["detail"]
    # Nothing of the attacker's is recorded, and the honest peer is the run's only one.
    assert [p["id"] for p in client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()] == [
        honest.peer_id
    ]


def test_a_peer_never_dials_an_address_the_coordinator_did_not_list():
    dialled: list[bytes] = []

    async def handler(frame: bytes) -> bytes:
        dialled.append(frame)
        return b"answer"

    async def scenario() -> None:
        listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
        listed, unlisted = (f"127.0.0.1:{s.getsockname()[1]}" for s in listeners)
        servers = [
            FrameServer(handler, max_bytes=1 << 20, pacer=UploadPacer(None), answer_text=lambda _: None)
        ]
        servers.append(
            FrameServer(handler, max_bytes=1 << 20, pacer=UploadPacer(None), answer_text=lambda _: None)
        )
        for server, listener in zip(servers, listeners, strict=True):
            await server.start(listener)
        pool = FramePool(max_bytes=1 << 20, pacer=UploadPacer(None))
        try:
            pool.learn([PeerEndpoint(peer_id=2, address=listed, stage=0)])
            assert await pool.request(listed, b"hello", timeout=10) == b"answer"
            for target in (unlisted, "169.254.169.254:80", "127.0.0.1:22"):
                with pytest.raises(TransportError, match="the coordinator did not list it"):
                    await pool.request(target, b"hello", timeout=10)
        finally:
            await pool.close()
            for server in servers:
                await server.stop()

    asyncio.run(scenario())
    assert dialled == [b"hello"]


def _checkpoint_put(client, run_id: int, step: int, stage: int, peer) -> object:
    return client.put(
        f"/api/runs/{run_id}/checkpoints/{step}/stages/{stage}",
        content=state_to_bytes({"model.weight": torch.full((2, 2), float(stage))}, {}),
        headers={
            "X-Peer-Id": str(peer.peer_id),
            "X-Peer-Credential": peer.credential,
            "Content-Type": "application/octet-stream",
        },
    )


def test_checkpoint_uploads_only_of_the_asked_stage_and_step_never_twice_never_by_a_removed_peer(
    api, app, client, owner_headers, admin_headers, run_id, connect_peer, eventually
):
    first, second = connect_peer(), connect_peer()
    assert (first.stage, second.stage) == (0, 1)
    for peer in (first, second):
        peer.send(StageReady(stage=peer.stage, step=0, origin="initialized"))
        peer.expect(SwarmView, skip=())
    assert client.post(f"/api/runs/{run_id}/pause", headers=owner_headers).status_code == 200
    for peer in (first, second):
        assert peer.expect(RunStatusChanged).status == "paused"
    assert client.post(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).status_code == 202
    for peer in (first, second):
        assert peer.expect(CheckpointRequest) == CheckpointRequest(step=0, stage=peer.stage)

    # The attacker (the first peer) plants the stage it does not serve, then a step nobody asked for.
    other_stage = _checkpoint_put(client, run_id, 0, 1, first)
    assert other_stage.status_code == 403
    assert "was asked for stage 0 of step 0, not stage 1" in other_stage.json()["detail"]
    with app.state.session_factory() as session:
        session.get_one(Run, run_id).current_step = 3
        session.commit()
    unasked = _checkpoint_put(client, run_id, 2, 0, first)
    assert unasked.status_code == 403
    assert "did not ask peer" in unasked.json()["detail"]

    # The honest uploads complete the step; nothing of the attacker's is in it.
    for peer in (first, second):
        response = _checkpoint_put(client, run_id, 0, peer.stage, peer)
        assert response.status_code == 200, response.text
    listed = client.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json()
    assert [(s["step"], s["complete"]) for s in listed] == [(0, True)]
    stored = client.get(f"/api/runs/{run_id}/checkpoints/0/stages/1", headers=owner_headers).content
    assert state_from_bytes(stored)[0]["model.weight"][0, 0] == 1.0

    # A complete stage is never overwritten, even by the peer that was asked for it.
    again = _checkpoint_put(client, run_id, 0, 0, first)
    assert again.status_code == 409 and "never overwritten" in again.json()["detail"]

    # Kicked: neither upload nor download.
    assert client.post(f"/api/peers/{first.peer_id}/kick", headers=admin_headers).status_code == 200
    kicked = {"X-Peer-Id": str(first.peer_id), "X-Peer-Credential": first.credential}
    assert _checkpoint_put(client, run_id, 0, 0, first).status_code == 401
    assert client.get(f"/api/runs/{run_id}/checkpoints/0/stages/0", headers=kicked).status_code == 401
    assert client.get(f"/api/runs/{run_id}/checkpoints/latest", headers=kicked).status_code == 401

    # Lost (its channel is gone): the coordinator no longer counts it as serving, so no reads either.
    second.disconnect()
    lost = {"X-Peer-Id": str(second.peer_id), "X-Peer-Credential": second.credential}

    def refused_as_lost():
        response = client.get(f"/api/runs/{run_id}/checkpoints/0/stages/1", headers=lost)
        return response.status_code == 403 and "is lost" in response.json()["detail"]

    eventually(refused_as_lost, "a lost peer's download refused")
    assert _checkpoint_put(client, run_id, 0, 1, second).status_code == 403

    # Revoked: a peer registered with a token its owner revoked reads nothing.
    issued = api.issue_token(owner_headers, run_id)
    registered = client.post("/api/peers/register", json=api.registration(issued["token"])).json()
    revoked = {"X-Peer-Id": str(registered["peer_id"]), "X-Peer-Credential": registered["credential"]}
    assert client.get(f"/api/runs/{run_id}/checkpoints/latest", headers=revoked).status_code == 200
    assert (
        client.delete(f"/api/runs/{run_id}/tokens/{issued['id']}", headers=owner_headers).status_code == 204
    )
    response = client.get(f"/api/runs/{run_id}/checkpoints/0/stages/0", headers=revoked)
    assert response.status_code == 401 and "revoked" in response.json()["detail"]


def test_the_refusal_scenario_is_sized_right():
    # 32 MiB: more than a two-stage tiny run needs, far less than one stage holding all of `small`.
    limit = 32 << 20
    run = dict(num_stages=1, microbatch_size=8, seq_len=256, optimizer="adamw")
    assert estimate_memory(PRESETS["small"], **run).total > limit
    assert estimate_memory(PRESETS["tiny"], **{**run, "num_stages": 2, "seq_len": 64}).total < limit


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_real_peer_refuses_a_run_larger_than_its_max_memory(tmp_path):
    with LocalSwarm(workdir=tmp_path) as swarm:
        big = swarm.create_run(
            name="too big", model_preset="small", num_stages=1, seq_len=256, target_batch_size=8
        )
        refusing = swarm.start_peer("--max-memory", "32MiB")
        assert refusing.process.wait(timeout=120) == 1
        log = refusing.log()
        assert f"run {big['id']} ('too big') needs about" in log
        assert "more than the 32.0 MiB this peer may use (--max-memory); not joining it" in log
        # Refused before it built anything: no data-plane server, no benchmark, no dataset download.
        assert "joined run" not in log

        # A peer with room for the run joins it and serves its stage.
        fitting = swarm.start_peer("--max-memory", "4GiB")

        def active() -> list[str]:
            assert fitting.alive(), fitting.log()
            return [row["name"] for row in swarm.peer_rows(big["id"]) if row["state"] == "active"]

        assert wait_until("the fitting peer to be active", active, timeout_s=120) == ["local-1"]
