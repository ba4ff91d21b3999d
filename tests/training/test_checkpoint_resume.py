"""A stage whose every peer is gone comes back from its latest checkpoint when new peers arrive."""

from __future__ import annotations

import signal
import time

import pytest

from launch.local_swarm import LocalSwarm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_stage_killed_entirely_resumes_from_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMHUB_CHECKPOINT_EVERY_STEPS", "5")
    with LocalSwarm(heartbeat_timeout_s=3) as swarm:
        run = swarm.create_run(name="resume", num_stages=2, max_steps=None, rebalance=False)
        peers = [swarm.start_peer("--stage", str(stage)) for stage in (0, 0, 1, 1)]
        swarm.wait_for_steps(run["id"], 12, timeout_s=150)
        checkpoints = swarm.client.get(f"/api/runs/{run['id']}/checkpoints").json()
        latest = max(c["step"] for c in checkpoints if c["complete"])
        assert latest >= 10

        for peer in peers[2:]:
            peer.process.send_signal(signal.SIGKILL)
        # With stage 1 gone no step can finish; wait until the coordinator has noticed.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = {p["name"]: p["state"] for p in swarm.client.get(f"/api/runs/{run['id']}/peers").json()}
            if states["local-2"] == states["local-3"] == "lost":
                break
            time.sleep(0.5)
        assert states["local-2"] == states["local-3"] == "lost"
        stalled_at = swarm.run_detail(run["id"])["current_step"]
        losses_before = [s["loss"] for s in swarm.steps(run["id"])]

        swarm.start_peer("--stage", "1")
        swarm.start_peer("--stage", "1")
        steps = swarm.wait_for_steps(run["id"], stalled_at + 10, timeout_s=150)
        events = swarm.events(run["id"])

    restored = [e for e in events if e["kind"] == "stage_restored"]
    assert restored and restored[0]["data"]["stage"] == 1
    assert not any(e["kind"] == "stage_reinitialized" for e in events)
    # The restored stage was trained, not fresh: loss right after resuming stays near where it was,
    # far below the untrained model's (about ln 256 = 5.5).
    resumed = [s["loss"] for s in steps if s["step"] >= stalled_at]
    assert sum(resumed[:3]) / 3 < losses_before[0] - 1.0
    for step in steps:
        for counted in step["samples_counted"]:
            assert counted <= step["samples_sent"]
