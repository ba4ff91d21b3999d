"""The coordinator killed at each phase boundary of a step, and peers joining while steps average.

A real coordinator dies abruptly (`SWARMHUB_FAULT_POINT`, `os._exit`, as SIGKILL would) at a chosen
boundary of step 3, is started again on the same database, and its peers reconnect. Whatever the
boundary: no step recorded as committed is undone, no peer is ever ahead of the database (no update
applied that was not recorded), peers keep their own state rather than being restored from a
checkpoint, and training continues with contiguous steps and balanced books.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess

import pytest

from launch.local_swarm import LocalSwarm
from server.fault_points import FAULT_EXIT_CODE
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S, assert_books_balance, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FAULT_STEP = 3


def _current_step(swarm: LocalSwarm, run_id: int) -> int:
    db = sqlite3.connect(swarm.workdir / "swarmhub.sqlite")
    try:
        (current,) = db.execute("SELECT current_step FROM runs WHERE id = ?", (run_id,)).fetchone()
        (recorded,) = db.execute("SELECT count(*) FROM steps WHERE run_id = ?", (run_id,)).fetchone()
    finally:
        db.close()
    assert recorded == current, "the run's step and its recorded steps disagree"
    return current


@pytest.mark.parametrize(
    ("point", "recorded"),
    [
        ("averaged", FAULT_STEP),  # averaged, not yet written: the step is taken again
        ("recorded", FAULT_STEP + 1),  # written, no peer told: they apply it when they rejoin
        ("applying", FAULT_STEP + 1),  # updates sent: whoever did not apply it yet applies it on rejoin
        ("opened", FAULT_STEP + 1),  # applied everywhere, next step opened
    ],
)
def test_coordinator_killed_at_a_phase_boundary_loses_no_committed_step(point: str, recorded: int) -> None:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name=f"fault {point}", rebalance=False, **DEMO_RUN)
        swarm.stop_coordinator()
        swarm.start_coordinator(fault_point=f"{point}@{FAULT_STEP}")
        for stage in (0, 1):
            swarm.start_peer("--stage", str(stage))
        assert swarm.coordinator is not None
        try:
            code = swarm.coordinator.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the coordinator never reached {point}@{FAULT_STEP}\n{swarm.logs()}")
        assert code == FAULT_EXIT_CODE, swarm.logs()
        assert _current_step(swarm, run["id"]) == recorded

        swarm.start_coordinator()
        steps = wait_until(
            "training to go on",
            lambda: s if len(s := swarm.steps(run["id"])) >= recorded + 3 else None,
            WAIT_S,
        )
        events = swarm.events(run["id"])
        logs = [p.log() for p in swarm.peers]
        assert all(p.alive() for p in swarm.peers), swarm.logs()

    assert_books_balance(steps, events, DEMO_RUN["num_stages"])
    kinds = {e["kind"] for e in events}
    assert not kinds & {"stage_restored", "stage_reinitialized"}, "a stage lost its trained state"
    reasons = [e["message"] for e in events if e["kind"] == "stage_assigned"]
    assert not [r for r in reasons if "copying again" in r], reasons
    for log in logs:
        # Each peer rejoined holding the state of the step the database says is next.
        served = re.findall(r"serving stage \d from step (\d+) \((.*?)\)", log)
        assert (str(recorded), "rejoined its stage") in served, served


def test_peers_joining_while_steps_average_are_assigned_once() -> None:
    """A joiner used to be re-assigned every ~12 ms while a step averaged (hundreds of rows)."""
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="joins", rebalance=False, **DEMO_RUN)
        for stage in (0, 1):
            swarm.start_peer("--stage", str(stage))
        wait_until("a first step", lambda: swarm.steps(run["id"]), WAIT_S)
        joiners = 3
        for index in range(joiners):
            swarm.start_peer("--stage", str(index % 2))
            first = len(swarm.steps(run["id"]))
            wait_until("another step", lambda first=first: len(swarm.steps(run["id"])) > first + 1, WAIT_S)
        wait_until(
            "every joiner serving",
            lambda: (
                sum(p["state"] == "active" and p["stage"] is not None for p in swarm.peer_rows(run["id"]))
                == 2 + joiners
            ),
            WAIT_S,
        )
        response = swarm.client.get(f"/api/runs/{run['id']}/assignments")
        response.raise_for_status()
        assignments = response.json()

    per_peer: dict[int, int] = {}
    for row in assignments:
        per_peer[row["peer_id"]] = per_peer.get(row["peer_id"], 0) + 1
    # Joined, and at most once more if its copy landed while a step averaged.
    assert len(per_peer) == 2 + joiners and max(per_peer.values()) <= 2, per_peer
