"""A peer that keeps heartbeating but does not answer data-plane calls is marked lost."""

from __future__ import annotations

import pytest

from launch.local_swarm import LocalSwarm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_peer_failing_calls_is_marked_lost_and_routed_around(monkeypatch: pytest.MonkeyPatch) -> None:
    # Calls give up after 3 s; the choked peer needs minutes to upload one activation.
    monkeypatch.setenv("SWARMHUB_PEER_CALL_TIMEOUT_S", "3")
    with LocalSwarm(heartbeat_timeout_s=10) as swarm:
        run = swarm.create_run(name="unreachable", num_stages=2, max_steps=None, rebalance=False)
        for stage in (0, 0, 1, 1):
            swarm.start_peer("--stage", str(stage))
        choked = swarm.start_peer("--stage", "0", "--upload-mbps", "0.005", "--no-trainer")
        swarm.wait_for_steps(run["id"], 15, timeout_s=180)
        events = swarm.events(run["id"])
        peers = swarm.client.get(f"/api/runs/{run['id']}/peers").json()
        assert choked.alive(), "it was never sent away: it only lost its place"
    choked_id = next(p["id"] for p in peers if p["name"] == "local-4")
    lost = [e for e in events if e["kind"] == "peer_lost" and e["peer_id"] == choked_id]
    assert lost and "could not reach it" in lost[0]["message"]
    # The others kept serving: none of them was reported.
    healthy = {p["id"] for p in peers if p["name"] != "local-4"}
    assert not [e for e in events if e["kind"] == "peer_lost" and e["peer_id"] in healthy]
