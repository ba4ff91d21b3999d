"""The participant's one line: `swarmhub-peer join URL --token T`, and leaving with Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from launch.local_swarm import LocalSwarm, PeerProcess, console_script, free_port

from .swarm_helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _peer_states(swarm: LocalSwarm, run_id: int) -> dict[str, str]:
    return {p["name"]: p["state"] for p in swarm.client.get(f"/api/runs/{run_id}/peers").json()}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_leave_cleanly(sig: signal.Signals) -> None:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="leave", num_stages=1, max_steps=None)
        peer = swarm.start_peer()
        swarm.wait_for_steps(run["id"], 2, timeout_s=120)
        peer.process.send_signal(sig)
        assert peer.process.wait(timeout=60) == 0
        assert "stopped (signal" in peer.log()
        # It said goodbye: the coordinator records a departure, not a loss.
        assert _peer_states(swarm, run["id"]) == {"local-0": "left"}
        assert any(e["kind"] == "peer_left" for e in swarm.events(run["id"]))


def test_peer_prints_progress_per_step() -> None:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="progress", num_stages=1, max_steps=3)
        peer = swarm.start_peer()
        swarm.wait_for_steps(run["id"], 3, timeout_s=120)
        assert peer.process.wait(timeout=60) == 0
        log = peer.log()
        assert "serving stage 0 from step 0" in log
        for step in range(3):
            assert f"step {step:5d}  loss" in log
        assert "run is finished; leaving" in log


def test_bad_token_is_a_clear_error() -> None:
    with LocalSwarm() as swarm:
        swarm.create_run(name="tokens", num_stages=1)
        result = subprocess.run(
            [console_script("swarmhub-peer"), "join", swarm.url, "--token", "not-a-real-token"],
            capture_output=True,
            text=True,
            timeout=60,
            env=swarm._env(),
        )
        assert result.returncode != 0
        assert "refused to register this peer: invalid or revoked join token" in result.stderr + result.stdout


def _retries(peer: PeerProcess) -> int:
    return peer.log().count("cannot reach the coordinator at")


def test_peer_started_before_the_coordinator_registers_once_it_listens() -> None:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="late coordinator", num_stages=1, max_steps=2)
        swarm.stop_coordinator()
        peer = swarm.start_peer()
        # Two failed attempts: the peer kept trying after the first instead of exiting.
        wait_until("the peer to retry registering", lambda: _retries(peer) >= 2 or not peer.alive())
        assert peer.alive(), peer.log()
        swarm.start_coordinator()
        wait_until(
            "the peer to register and serve stage 0",
            lambda: (
                [(p["name"], p["stage"], p["state"]) for p in swarm.peer_rows(run["id"])]
                == [("local-0", 0, "active")]
            ),
        )
        swarm.wait_for_steps(run["id"], 2, timeout_s=120)
        assert peer.process.wait(timeout=60) == 0
        log = peer.log()
    assert "serving stage 0 from step 0" in log
    assert "run is finished; leaving" in log


def test_ctrl_c_while_waiting_for_the_coordinator_leaves_cleanly(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    log_path = tmp_path / "peer.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [console_script("swarmhub-peer"), "join", url, "--token", "whatever-token"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    peer = PeerProcess(index=0, process=process, log_path=log_path, options=[])
    try:
        wait_until("the peer to retry registering", lambda: _retries(peer) >= 1 or not peer.alive())
        assert f"cannot reach the coordinator at {url}" in peer.log()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, peer.log()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "stopped (signal SIGINT)" in peer.log()
