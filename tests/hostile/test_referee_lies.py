"""Peers must not be able to turn spot-check arbitration against honest peers.

The attacker is a member of the run like any other, speaking the real control channel of a real
coordinator: it sends verdicts on cases it was never asked to referee and reports mismatches between
peers it never called. Each is a strike against it, and nobody it names is harmed; malformed reports
are refused by the wire schema before the run hears them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from swarmhub.wire import (
    Arbitrate,
    ArbitrationVerdict,
    DataPlaneTicket,
    Message,
    NoWork,
    SpotCheckMismatch,
    StageReady,
    StepBarrier,
    SwarmView,
    WorkGrant,
    WorkRequest,
)

POLICY_VIOLATION = 1008
IN_PASSING = (SwarmView, StepBarrier, DataPlaneTicket)
"""Frames the coordinator sends on its own time, whatever the peer said."""


@dataclass
class Run:
    run_id: int
    checked: Any
    checker: Any
    third: Any
    """Stage 0's third peer: the only one that may referee a stage 0 dispute."""
    trainer: Any
    """Stage 1's honest peer, which trains and was granted a microbatch: it may report on stage 0."""
    attacker: Any
    """A ready member of stage 1 that never asked for work."""


def start_run(client, owner_headers, connect_peer, eventually) -> Run:
    run_id = client.post(
        "/api/runs", json={"name": "referees", "rebalance": False}, headers=owner_headers
    ).json()["id"]
    stage0 = [connect_peer(run_id=run_id, requested_stage=0) for _ in range(3)]
    stage1 = [connect_peer(run_id=run_id, requested_stage=1) for _ in range(2)]
    for peer in (*stage0, *stage1):
        assert peer.stage == (0 if peer in stage0 else 1)
        peer.send(StageReady(stage=peer.stage, step=0, origin="initialized"))
    run = Run(run_id, *stage0, *stage1)
    eventually(lambda: granted(run.trainer), "a grant once every stage has a ready peer")
    return run


def granted(peer) -> bool:
    """Ask for work: True if granted (NoWork while a stage's readiness is still on its way)."""
    peer.send(WorkRequest())
    while isinstance(reply := peer.receive(), IN_PASSING):
        pass
    assert isinstance(reply, WorkGrant | NoWork), reply
    return isinstance(reply, WorkGrant)


def next_frame(peer, kind: type[Message]) -> Any:
    """The next frame that is not one the coordinator sends in passing; it must be a `kind`."""
    return peer.expect(kind, skip=IN_PASSING)


def mismatch(run: Run, case: int = 7) -> SpotCheckMismatch:
    return SpotCheckMismatch(
        case=case,
        step=0,
        stage=0,
        microbatch_id="mb-1",
        kind="forward",
        checked=run.checked.peer_id,
        checker=run.checker.peer_id,
        checked_digest="a" * 64,
        checker_digest="b" * 64,
        discrepancy=0.5,
        tolerance=0.01,
    )


def convicting(case_id: int) -> ArbitrationVerdict:
    """A verdict that, from the referee, would ban the checked peer."""
    return ArbitrationVerdict(
        case_id=case_id,
        valid=True,
        agrees_with_checked=False,
        agrees_with_checker=True,
        discrepancy_checked=0.5,
        tolerance=0.01,
    )


def events(client, owner_headers, run_id: int) -> list[dict[str, Any]]:
    return client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()


def strikes_of(client, owner_headers, run: Run, peer_id: int) -> list[dict[str, Any]]:
    return [
        e
        for e in events(client, owner_headers, run.run_id)
        if e["kind"] == "peer_misbehaving" and e["peer_id"] == peer_id
    ]


def states(client, owner_headers, run_id: int) -> dict[int, str]:
    return {
        p["id"]: p["state"] for p in client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()
    }


def assert_nobody_harmed(client, owner_headers, run: Run) -> None:
    assert set(states(client, owner_headers, run.run_id).values()) == {"active"}
    kinds = {e["kind"] for e in events(client, owner_headers, run.run_id)}
    assert not kinds & {"peer_faulty", "peer_kicked", "peer_banned", "peer_lost"}


def test_a_verdict_on_a_case_it_was_not_asked_to_referee_bans_nobody(
    client, owner_headers, connect_peer, eventually
):
    run = start_run(client, owner_headers, connect_peer, eventually)
    run.trainer.send(mismatch(run))
    arbitrate = next_frame(run.trainer, Arbitrate)
    assert arbitrate.referee.peer_id == run.third.peer_id

    # The attacker knows the case exists (case ids count up) and would convict the checked peer.
    run.attacker.send(convicting(arbitrate.case_id))
    run.attacker.send(convicting(arbitrate.case_id + 100))
    (strike,) = eventually(
        lambda: strikes_of(client, owner_headers, run, run.attacker.peer_id), "the attacker's strike"
    )
    assert f"case {arbitrate.case_id} it was not asked to referee" in strike["message"]
    assert_nobody_harmed(client, owner_headers, run)

    # The case still waits for its referee, whose verdict alone counts.
    run.third.send(convicting(arbitrate.case_id))
    closed = run.checked.expect_close(skip=IN_PASSING)
    assert closed.code == 4001 and closed.reason.startswith("banned: ")
    banned = eventually(
        lambda: [e for e in events(client, owner_headers, run.run_id) if e["kind"] == "peer_faulty"],
        "the referee's verdict",
    )
    assert [e["peer_id"] for e in banned] == [run.checked.peer_id]
    assert banned[0]["data"]["referee"] == run.third.peer_id


def test_a_mismatch_between_peers_it_never_called_opens_no_case(
    client, owner_headers, connect_peer, eventually
):
    run = start_run(client, owner_headers, connect_peer, eventually)
    run.attacker.send(mismatch(run))
    # Replies come in the order of what the peer said: an Arbitrate would precede the grant.
    run.attacker.send(WorkRequest())
    next_frame(run.attacker, WorkGrant)
    (strike,) = eventually(
        lambda: strikes_of(client, owner_headers, run, run.attacker.peer_id), "the attacker's strike"
    )
    assert "no reason to call" in strike["message"]
    kinds = [e["kind"] for e in events(client, owner_headers, run.run_id)]
    assert "spot_check_mismatch" not in kinds and "spot_check_referee" not in kinds
    assert_nobody_harmed(client, owner_headers, run)
    # Nor did the third peer hear of it: the only frames it gets are the run's own.
    run.third.send(WorkRequest())
    next_frame(run.third, WorkGrant)


def _raw(message: Message, **changes: Any) -> dict[str, Any]:
    return message.model_dump(mode="json") | changes


MALFORMED = {
    "a digest that is not hex": lambda run: _raw(mismatch(run), checked_digest="z" * 64),
    "a short digest": lambda run: _raw(mismatch(run), checker_digest="ab"),
    "a negative discrepancy": lambda run: _raw(mismatch(run), discrepancy=-0.5),
    "a negative tolerance": lambda run: _raw(mismatch(run), tolerance=-1.0),
    "an unknown call kind": lambda run: _raw(mismatch(run), kind="sideways"),
    "a peer id of zero": lambda run: _raw(mismatch(run), checked=0),
    "a negative case id in a verdict": lambda run: _raw(convicting(1), case_id=-1),
    "a negative discrepancy in a verdict": lambda run: _raw(convicting(1), discrepancy_checker=-0.1),
    "an absurd tolerance in a verdict": lambda run: _raw(convicting(1), tolerance=1e31),
    "an unknown message type": lambda run: _raw(mismatch(run), type="spot_check_mismatches"),
}


@pytest.mark.parametrize("what", list(MALFORMED))
def test_malformed_arbitration_reports_are_refused_by_the_schema(
    what, client, owner_headers, connect_peer, eventually
):
    run = start_run(client, owner_headers, connect_peer, eventually)
    run.attacker.ws.send_text(json.dumps(MALFORMED[what](run)))
    closed = run.attacker.expect_close(skip=IN_PASSING)
    assert closed.code == POLICY_VIOLATION and closed.reason.startswith("invalid frame"), (what, closed)
    eventually(
        lambda: states(client, owner_headers, run.run_id)[run.attacker.peer_id] == "lost",
        "the attacker's channel closed",
    )
    kinds = {e["kind"] for e in events(client, owner_headers, run.run_id)}
    assert not kinds & {"spot_check_mismatch", "spot_check_referee", "peer_faulty", "peer_misbehaving"}
    honest = (run.checked, run.checker, run.third, run.trainer)
    assert all(states(client, owner_headers, run.run_id)[p.peer_id] == "active" for p in honest)
    # The run goes on: the honest trainer is granted work.
    run.trainer.send(WorkRequest())
    next_frame(run.trainer, WorkGrant)
