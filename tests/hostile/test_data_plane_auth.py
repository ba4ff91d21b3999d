"""The data plane authenticates senders, not runs.

An attacker registers with a join token of its own like any participant, speaks the control channel's
raw JSON from a plain websocket client (with a frame-signing key of its own, so the coordinator
issues it real tickets), and calls honest peers' data planes directly. An honest swarm (one peer on
stage 0, two on stage 1, which average their gradients) trains alongside. Each attack is refused
with a clear reason, and the honest run keeps stepping with balanced books.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from launch.local_swarm import LocalSwarm
from peer.frame_auth import FrameSigner
from peer.frame_headers import ErrorReply, FetchState, FrameHeader, PushGrads
from peer.frames import decode_frame, encode_frame
from peer.model import build_stage
from swarmhub.presets import get_preset
from swarmhub.tickets import TICKET_LIFETIME_S
from swarmhub.wire import DATA_PLANE_VERSION, DataPlaneTicket
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S, assert_books_balance, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

POLICY_VIOLATION = 1008
REPLY_LIMIT = 1 << 28


class Attacker:
    """A registered peer on the real control channel: heartbeats, keeps its tickets, nothing else."""

    def __init__(self, swarm: LocalSwarm, token: str, name: str, fingerprint: str = "") -> None:
        self.swarm = swarm
        self.signer = FrameSigner()
        registration = {
            "join_token": token,
            "listen_port": 9,
            "announce": "127.0.0.1:9",  # nothing listens there: it never serves a stage
            "device": "cpu",
            "data_plane_version": DATA_PLANE_VERSION,
            "throughput": 1.0,
            "name": name,
            "tls_fingerprint": fingerprint,
        }
        self.registered = httpx.post(f"{swarm.url}/api/peers/register", json=registration, timeout=30)
        self.closed: tuple[int, str] | None = None
        self.kicked = ""
        self._thread: threading.Thread | None = None

    @property
    def peer_id(self) -> int:
        return self.registered.json()["peer_id"]

    def hello(self) -> None:
        """Open the control channel; a background thread keeps it alive and takes every ticket."""
        channel = connect(self.swarm.url.replace("http", "ws") + "/ws/peer", open_timeout=30)
        credential = self.registered.json()["credential"]
        hello = {"type": "hello", "peer_id": self.peer_id, "credential": credential}
        channel.send(json.dumps({**hello, "frame_key": self.signer.public_key}))
        self.closed = None

        def follow() -> None:
            beat = 0.0
            try:
                while True:
                    if time.monotonic() - beat > 1.0:
                        beat = time.monotonic()
                        channel.send(
                            json.dumps(
                                {"type": "heartbeat", "throughput": 0, "queue_length": 0, "samples_done": 0}
                            )
                        )
                    try:
                        raw = channel.recv(timeout=0.5)
                    except TimeoutError:
                        continue
                    message = json.loads(raw)
                    if message["type"] == "data_plane_ticket":
                        self.signer.take(DataPlaneTicket.model_validate_json(raw).ticket)
                    elif message["type"] == "kicked":
                        self.kicked = message["reason"]
            except ConnectionClosed as exc:
                self.closed = (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd is not None else (0, "")

        self._thread = threading.Thread(target=follow, daemon=True)
        self._thread.start()

    def wait_closed(self) -> tuple[int, str]:
        return wait_until("the coordinator to close the attacker's channel", lambda: self.closed, 30)

    def call(
        self, peer: dict[str, Any], header: FrameHeader, tensors: dict[str, torch.Tensor] | None = None
    ) -> str:
        """Send one signed call to `peer`'s data plane: '' if it was served, else the refusal."""
        frame = encode_frame(header, tensors, signer=self.signer, receiver=peer["id"])
        with connect(f"ws://{peer['address']}", max_size=None, compression=None) as ws:
            ws.send(frame)
            reply = ws.recv(timeout=60)
        answer, _ = decode_frame(reply, max_bytes=REPLY_LIMIT)
        return answer.error if isinstance(answer, ErrorReply) else ""


@pytest.fixture(scope="module")
def swarm_run() -> Iterator[tuple[LocalSwarm, dict[str, Any]]]:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="strangers", rebalance=False, **DEMO_RUN)
        for stage in (0, 1, 1):
            swarm.start_peer("--stage", str(stage))
        wait_until("a first step", lambda: swarm.steps(run["id"]), WAIT_S)
        yield swarm, run


def _token(swarm: LocalSwarm, run_id: int) -> dict[str, Any]:
    """A join token of its own for each participant, as an owner hands them out."""
    response = swarm.client.post(f"/api/runs/{run_id}/tokens", json={"label": "stranger"})
    response.raise_for_status()
    return response.json()


def _honest(swarm: LocalSwarm, run_id: int) -> list[dict[str, Any]]:
    return [p for p in swarm.peer_rows(run_id) if p["name"].startswith("local-")]


def _stage_peers(swarm: LocalSwarm, run_id: int, stage: int) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        peers = [p for p in _honest(swarm, run_id) if p["state"] == "active" and p["stage"] == stage]
        return peers if peers else None

    return wait_until(f"active peers of stage {stage}", ready, WAIT_S)


def _fetch(swarm: LocalSwarm, run_id: int, sender: int, stage: int) -> FetchState:
    return FetchState(
        run_id=run_id, sender=sender, stage=stage, step=swarm.run_detail(run_id)["current_step"]
    )


def _assert_honest_run_goes_on(swarm: LocalSwarm, run: dict[str, Any], attacker: Attacker) -> None:
    committed = len(swarm.steps(run["id"]))
    steps = swarm.wait_for_steps(run["id"], committed + 3, timeout_s=WAIT_S)
    events = swarm.events(run["id"])
    assert_books_balance(steps, events, DEMO_RUN["num_stages"])
    honest = _honest(swarm, run["id"])
    assert sorted(p["stage"] for p in honest if p["state"] == "active") == [0, 1, 1]
    assert all(p.alive() for p in swarm.peers)
    assert not [e for e in events if e["kind"] == "peer_lost" and e["peer_id"] in {p["id"] for p in honest}]
    row = next(p for p in swarm.peer_rows(run["id"]) if p["id"] == attacker.peer_id)
    assert row["stage"] is None  # it never served anything


def test_a_peer_cannot_replace_another_members_gradient_share(swarm_run) -> None:
    swarm, run = swarm_run
    run_id = run["id"]
    attacker = Attacker(swarm, _token(swarm, run_id)["token"], "mallory")
    attacker.hello()
    wait_until("the attacker's ticket", lambda: attacker.signer.ticket, 30)
    victim, receiver = _stage_peers(swarm, run_id, 1)[:2]
    size = sum(p.numel() for p in build_stage(get_preset(DEMO_RUN["model_preset"]), 1, 2, 0).parameters())
    step = swarm.run_detail(run_id)["current_step"]
    # The victim's share of this step's average, replaced by garbage, under the victim's id.
    forged = PushGrads(run_id=run_id, sender=victim["id"], stage=1, step=step, attempt=0, counted=[])
    refusal = attacker.call(receiver, forged, {"grads": torch.full((size,), 1e3)})
    assert f"ticket is for peer {attacker.peer_id}, but the frame says it is from {victim['id']}" in refusal
    # Nor with the victim's id in a ticket of its own making.
    attacker.signer.ticket = attacker.signer.ticket.model_copy(update={"peer_id": victim["id"]})
    refusal = attacker.call(receiver, forged, {"grads": torch.full((size,), 1e3)})
    assert "was not issued by this run's coordinator" in refusal
    _assert_honest_run_goes_on(swarm, run, attacker)


def test_a_kicked_peer_is_cut_off_the_data_plane_within_seconds(swarm_run) -> None:
    swarm, run = swarm_run
    run_id = run["id"]
    attacker = Attacker(swarm, _token(swarm, run_id)["token"], "kicked-one")
    attacker.hello()
    wait_until("the attacker's ticket", lambda: attacker.signer.ticket, 30)
    target = _stage_peers(swarm, run_id, 0)[0]
    # While admitted, its calls are served: the ticket is real.
    assert attacker.call(target, _fetch(swarm, run_id, attacker.peer_id, 0)) == ""

    assert swarm.client.post(f"/api/peers/{attacker.peer_id}/kick").status_code == 200
    assert attacker.wait_closed() == (POLICY_VIOLATION, "removed: kicked by an admin")

    # It kept its last ticket; within its lifetime at most, every honest peer refuses it.
    def refused() -> str:
        return attacker.call(target, _fetch(swarm, run_id, attacker.peer_id, 0))

    refusal = wait_until("the kicked peer to be refused", refused, TICKET_LIFETIME_S + 10)
    assert "was removed from the run" in refusal or "has expired" in refusal
    _assert_honest_run_goes_on(swarm, run, attacker)


def test_a_revoked_tokens_peer_cannot_reconnect_or_call(swarm_run) -> None:
    swarm, run = swarm_run
    run_id = run["id"]
    token = _token(swarm, run_id)
    attacker = Attacker(swarm, token["token"], "revoked-one")
    attacker.hello()
    wait_until("the attacker's ticket", lambda: attacker.signer.ticket, 30)
    target = _stage_peers(swarm, run_id, 1)[0]
    assert attacker.call(target, _fetch(swarm, run_id, attacker.peer_id, 1)) == ""

    assert swarm.client.delete(f"/api/runs/{run_id}/tokens/{token['id']}").status_code == 204
    assert attacker.wait_closed() == (POLICY_VIOLATION, f"removed: join token {token['id']} revoked")
    assert attacker.kicked == f"join token {token['id']} revoked"
    # The credential it registered with no longer opens a channel ...
    attacker.hello()
    code, reason = attacker.wait_closed()
    assert code == POLICY_VIOLATION and "bad credential" in reason
    # ... the token registers no one ...
    again = httpx.post(
        f"{swarm.url}/api/peers/register",
        json={
            "join_token": token["token"],
            "listen_port": 9,
            "device": "cpu",
            "throughput": 1.0,
            "data_plane_version": DATA_PLANE_VERSION,
        },
        timeout=30,
    )
    assert again.status_code == 401
    # ... and its data-plane calls are refused.
    refusal = wait_until(
        "the revoked peer to be refused",
        lambda: attacker.call(target, _fetch(swarm, run_id, attacker.peer_id, 1)),
        TICKET_LIFETIME_S + 10,
    )
    assert "was removed from the run" in refusal or "has expired" in refusal
    _assert_honest_run_goes_on(swarm, run, attacker)


def test_a_banned_peer_cannot_come_back_under_another_name(swarm_run) -> None:
    swarm, run = swarm_run
    run_id = run["id"]
    token = _token(swarm, run_id)["token"]
    fingerprint = secrets.token_hex(32)
    attacker = Attacker(swarm, token, "troll", fingerprint)
    attacker.hello()
    wait_until("the attacker's ticket", lambda: attacker.signer.ticket, 30)

    assert swarm.client.post(f"/api/peers/{attacker.peer_id}/ban").status_code == 200
    assert attacker.wait_closed() == (POLICY_VIOLATION, "removed: banned by an admin")
    # Another name, same token: refused.
    renamed = Attacker(swarm, token, "a-friendly-newcomer")
    assert renamed.registered.status_code == 403
    assert "banned" in renamed.registered.json()["detail"]
    # Another token, same data-plane key: refused.
    rekeyed = Attacker(swarm, _token(swarm, run_id)["token"], "someone-else", fingerprint)
    assert rekeyed.registered.status_code == 403
    # A participant with a token and key of their own is welcome: the ban holds for an identity only.
    newcomer = Attacker(swarm, _token(swarm, run_id)["token"], "troll")
    assert newcomer.registered.status_code == 201
    _assert_honest_run_goes_on(swarm, run, attacker)
