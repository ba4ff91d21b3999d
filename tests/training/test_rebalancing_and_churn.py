"""Real swarms under stress: peers piled on one stage, peers killed and replaced, the coordinator restarted.

Every test runs a real coordinator (`swarmhub serve`) and real peer processes (`swarmhub-peer
join`) over loopback. Nothing here measures speed: waits are upper bounds for a stuck swarm, and
the assertions are on step counts, peer states, events, sample books and losses.
"""

from __future__ import annotations

import signal
import sqlite3
import statistics
import time
from datetime import datetime
from typing import Any

import pytest

from launch.local_swarm import LocalSwarm

pytestmark = pytest.mark.slow

RUN: dict[str, Any] = {
    "model_preset": "tiny",
    "num_stages": 2,
    "target_batch_size": 32,
    "microbatch_size": 8,
    "seq_len": 64,
}
WAIT_S = 150.0
"""Upper bound for anything to happen on a loaded machine; never asserted as a speed."""


def wait_until(what: str, predicate: Any, swarm: LocalSwarm, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}\n{swarm.logs()}")
        if swarm.peers and not any(p.alive() for p in swarm.peers):
            raise AssertionError(f"every peer exited while waiting for {what}\n{swarm.logs()}")
        time.sleep(0.3)


def wait_for_steps(swarm: LocalSwarm, run_id: int, count: int) -> list[dict[str, Any]]:
    return wait_until(f"{count} steps", lambda: (s := swarm.steps(run_id)) and len(s) >= count and s, swarm)


def assignments_of(swarm: LocalSwarm, run_id: int) -> list[dict[str, Any]]:
    response = swarm.client.get(f"/api/runs/{run_id}/assignments")
    response.raise_for_status()
    return response.json()


def kinds(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


def at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp)


def check_books(steps: list[dict[str, Any]], events: list[dict[str, Any]], num_stages: int) -> None:
    """Every step: no stage counts more than was sent; what a stage did not count is its recorded loss."""
    lost_events: dict[int, dict[int, int]] = {}
    for event in kinds(events, "samples_lost"):
        step = event["data"]["step"]
        assert step not in lost_events, f"two samples_lost events for step {step}"
        lost_events[step] = {int(stage): lost for stage, lost in event["data"]["lost"].items()}
        row = next(s for s in steps if s["step"] == step)
        assert event["data"]["sent"] == row["samples_sent"], (event, row)
    for row in steps:
        sent, counted = row["samples_sent"], row["samples_counted"]
        lost = lost_events.get(row["step"], {})
        # A failed microbatch's samples are sent again, so a step sends at least its batch.
        assert sent >= RUN["target_batch_size"], row
        assert len(counted) == num_stages, row
        assert set(lost) <= set(range(num_stages)), (row, lost)
        for stage in range(num_stages):
            assert 0 <= counted[stage] <= sent, f"stage {stage} counted more than was sent: {row}"
            assert sent - counted[stage] == lost.get(stage, 0), (row, lost)
        assert row["samples_lost"] == max(lost.values(), default=0), (row, lost)


# ---- rebalancing ---------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_peers_piled_on_one_stage_are_spread_and_without_rebalancing_nothing_moves() -> None:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="all on stage 0", max_steps=10, **RUN)
        for _ in range(4):
            swarm.start_peer("--stage", "0")
        # Alongside it, the same start with rebalancing off (its peers only idle, so they barely
        # slow the first run down).
        still = swarm.create_run(name="all on stage 0, no rebalancing", rebalance=False, **RUN)
        assert still["rebalance"] is False
        for _ in range(4):
            swarm.start_peer("--stage", "0")

        steps = wait_for_steps(swarm, run["id"], 10)
        events = swarm.events(run["id"])
        assert len(steps) == 10
        assert [s["step"] for s in steps] == list(range(10))

        moves = kinds(events, "rebalance")
        assert moves, swarm.logs()
        first = moves[0]
        assert (first["data"]["from_stage"], first["data"]["to_stage"]) == (0, 1)
        # Stage 1 had no peer, so no step could commit before the move; after it, steps commit.
        assert first["data"]["step"] == 0
        assert first["data"]["rate_before"] == 0
        assert at(first["created_at"]) <= at(steps[0]["created_at"])
        assert "stage 1" in first["message"] and "stage 0" in first["message"]

        peers = swarm.peer_rows(run["id"])
        assert len(peers) == 4
        assert {p["stage"] for p in peers} == {0, 1}, peers
        # What the dashboard shows: every peer joined stage 0 as it asked, then the moves.
        history = assignments_of(swarm, run["id"])
        joins = [a for a in history if a["reason"] == "joined"]
        assert sorted(a["peer_id"] for a in joins) == sorted(p["id"] for p in peers)
        assert all(a["stage"] == 0 for a in joins), history
        rebalanced = [a for a in history if a["reason"] == "rebalanced"]
        assert len(rebalanced) == len(moves), (history, moves)
        assert (rebalanced[0]["peer_id"], rebalanced[0]["stage"], rebalanced[0]["step"]) == (
            first["peer_id"],
            1,
            0,
        )
        for peer in peers:
            last = [a for a in history if a["peer_id"] == peer["id"]][-1]
            assert last["stage"] == peer["stage"], (peer, history)
        check_books(steps, events, RUN["num_stages"])

        # Without rebalancing, stage 1 stays empty and no step can commit.
        wait_until(
            "4 active peers on stage 0",
            lambda: [(p["state"], p["stage"]) for p in swarm.peer_rows(still["id"])] == [("active", 0)] * 4,
            swarm,
        )
        # A peer prints this just before it tells the coordinator it is ready, and each ready
        # report makes the coordinator consult rebalancing: with it on, the last one moves a peer.
        still_peers = swarm.peers[4:]
        wait_until(
            "the 4 peers to serve stage 0",
            lambda: all("serving stage 0 from step 0" in p.log() for p in still_peers),
            swarm,
        )
        # Removing a peer makes the coordinator consult rebalancing again (stage 1 still empty),
        # and the kick answers only once that is done: a move would be in the events by now.
        kicked = swarm.peer_rows(still["id"])[0]
        response = swarm.client.post(f"/api/peers/{kicked['id']}/kick", json={"reason": "test"})
        response.raise_for_status()
        assert response.json()["state"] == "kicked"
        events = swarm.events(still["id"])
        assert not kinds(events, "rebalance"), events
        assert swarm.steps(still["id"]) == []
        assert {p["stage"] for p in swarm.peer_rows(still["id"])} == {0}
        assert all(a["reason"] == "joined" for a in assignments_of(swarm, still["id"]))
        assert swarm.run_detail(still["id"])["current_step"] == 0


# ---- churn ---------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_peers_killed_and_replaced_during_training_books_balance() -> None:
    with LocalSwarm(heartbeat_timeout_s=3.0) as swarm:
        run = swarm.create_run(name="churn", **RUN)
        for stage in (0, 0, 0, 1, 1, 1):
            swarm.start_peer("--stage", str(stage))
        wait_for_steps(swarm, run["id"], 4)

        killed: list[int] = []
        by_name = {f"local-{p.index}": p for p in swarm.peers}
        for cycle in range(3):
            # The newcomer is started first (a peer takes a while to import and benchmark) on the
            # stage that will lose a peer; the victim is chosen and killed once it is in.
            active = [p for p in swarm.peer_rows(run["id"]) if p["state"] == "active"]
            # Alternate stages where they are equally served.
            counts = {s: sum(p["stage"] == s for p in active) for s in range(RUN["num_stages"])}
            stage = max(counts, key=lambda s: (counts[s], s == cycle % 2))
            newcomer = swarm.start_peer("--stage", str(stage))
            newcomer_name = f"local-{newcomer.index}"
            by_name[newcomer_name] = newcomer
            wait_until(
                f"{newcomer_name} to join",
                lambda name=newcomer_name: any(
                    p["name"] == name and p["state"] == "active" for p in swarm.peer_rows(run["id"])
                ),
                swarm,
            )
            active = [
                p for p in swarm.peer_rows(run["id"]) if p["state"] == "active" and p["name"] != newcomer_name
            ]
            per_stage = {s: [p for p in active if p["stage"] == s] for s in range(RUN["num_stages"])}
            # The newcomer's stage if rebalancing left it two others, never the last peer of a stage.
            newcomer_stage = stage
            stage = max(
                per_stage, key=lambda s: (len(per_stage[s]) >= 2, s == newcomer_stage, len(per_stage[s]))
            )
            assert len(per_stage[stage]) >= 2, per_stage
            victim = per_stage[stage][-1]
            process = by_name[victim["name"]]
            process.process.send_signal(signal.SIGKILL)
            process.process.wait()
            killed.append(victim["id"])
            before = len(swarm.steps(run["id"]))
            wait_until(
                f"peer {victim['id']} to be lost",
                lambda victim_id=victim["id"]: any(
                    p["id"] == victim_id and p["state"] == "lost" for p in swarm.peer_rows(run["id"])
                ),
                swarm,
            )
            wait_for_steps(swarm, run["id"], before + 3)

        steps = wait_for_steps(swarm, run["id"], 30)
        events = swarm.events(run["id"])
        peers = {p["id"]: p for p in swarm.peer_rows(run["id"])}

    assert [s["step"] for s in steps] == list(range(len(steps))), "steps commit in order, none skipped"
    losses = [s["loss"] for s in steps]
    assert all(loss is not None for loss in losses)
    assert statistics.mean(losses[-5:]) < statistics.mean(losses[:5]), losses
    check_books(steps, events, RUN["num_stages"])
    lost_ids = {e["peer_id"] for e in kinds(events, "peer_lost")}
    for peer_id in killed:
        assert peer_id in lost_ids, (peer_id, kinds(events, "peer_lost"))
        assert peers[peer_id]["state"] == "lost", peers[peer_id]
    assert len(peers) == 9, "6 peers and 3 replacements registered"


# ---- coordinator restart -------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_coordinator_restart_mid_run_continues_the_same_run_and_steps() -> None:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="restart", **RUN)
        for stage in (0, 0, 1, 1):
            swarm.start_peer("--stage", str(stage))
        wait_for_steps(swarm, run["id"], 5)
        before_peers = {p["id"]: p for p in swarm.peer_rows(run["id"])}
        assert sorted(p["state"] for p in before_peers.values()) == ["active"] * 4

        swarm.stop_coordinator()
        db = sqlite3.connect(swarm.workdir / "swarmhub.sqlite")
        try:
            (current_step,) = db.execute(
                "SELECT current_step FROM runs WHERE id = ?", (run["id"],)
            ).fetchone()
            (committed,) = db.execute("SELECT count(*) FROM steps WHERE run_id = ?", (run["id"],)).fetchone()
        finally:
            db.close()
        assert current_step >= 5
        assert committed == current_step
        swarm.start_coordinator()

        steps = wait_for_steps(swarm, run["id"], current_step + 5)
        wait_until(
            "the same 4 peers active again",
            lambda: (
                sorted((p["id"], p["state"]) for p in swarm.peer_rows(run["id"]))
                == sorted((peer_id, "active") for peer_id in before_peers)
            ),
            swarm,
        )
        events = swarm.events(run["id"])
        detail = swarm.run_detail(run["id"])
        peers = {p["id"]: p for p in swarm.peer_rows(run["id"])}

    assert detail["id"] == run["id"] and detail["status"] == "active"
    assert [s["step"] for s in steps] == list(range(len(steps))), "no step repeated or skipped"
    assert len(steps) >= current_step + 5
    # The first step committed by the restarted coordinator is the one the old one had open.
    rejoined_events = kinds(events, "peer_rejoined")
    assert {e["peer_id"] for e in rejoined_events} == set(before_peers), rejoined_events
    back = min(at(e["created_at"]) for e in rejoined_events)
    assert all(at(s["created_at"]) < back for s in steps[:current_step])
    assert all(at(s["created_at"]) > back for s in steps[current_step:])
    assert set(peers) == set(before_peers), "no peer registered anew"
    # The coordinator went down, not its peers: the channels it closed on its way out are nobody's
    # departure, and the step it had open is taken again by the next one, not committed empty.
    assert not kinds(events, "peer_lost"), kinds(events, "peer_lost")
    assert not kinds(events, "samples_lost"), kinds(events, "samples_lost")
    check_books(steps, events, RUN["num_stages"])
