"""The participant's one line: `swarmhub-peer join URL --token T`, and leaving with Ctrl-C."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
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


# What a participant reads, in order, from the first line on; the step lines come later.
FIRST_LINES = [
    "swarmhub-peer ",
    "registering with the coordinator at ",
    "registered as peer ",
    "benchmarking this device (cpu)",
    "benchmark: ",
    "dataset python-stdlib: ",
    "opening the control channel",
    "connected to the coordinator",
    "run is paused by its owner",
    "serving stage 0 from step 0",
    "run resumed",
]


def _in_order(lines: list[str], prefixes: list[str]) -> list[str]:
    """The first line starting with each prefix, each found after the one before; fails on the first
    prefix missing or out of order."""
    found: list[str] = []
    at = 0
    for prefix in prefixes:
        index = next((i for i in range(at, len(lines)) if lines[i].startswith(prefix)), None)
        assert index is not None, f"no {prefix!r} after {found[-1:]!r} in:\n" + "\n".join(lines)
        found.append(lines[index])
        at = index + 1
    return found


def test_peer_says_what_it_does_from_the_first_line_under_its_name() -> None:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="progress", num_stages=1, max_steps=4)
        swarm.client.post(f"/api/runs/{run['id']}/pause").raise_for_status()
        peer = swarm.start_peer()
        wait_until("the peer to serve its stage", lambda: "serving stage 0" in peer.log() or not peer.alive())
        swarm.client.post(f"/api/runs/{run['id']}/resume").raise_for_status()
        swarm.wait_for_steps(run["id"], 4, timeout_s=120)
        assert peer.process.wait(timeout=60) == 0
        log = peer.log()
    # Every line the peer prints on stdout carries its --name (warnings go through logging).
    lines = [line.removeprefix("[local-0] ") for line in log.splitlines() if line.startswith("[local-0] ")]
    _in_order(lines, FIRST_LINES)
    downloads = [line for line in lines if line.startswith("downloading dataset")]
    assert not downloads or "100%" in downloads[-1], downloads
    steps = _in_order(lines, [f"step {n}/4  loss " for n in range(1, 5)])
    assert all(" ETA " in line for line in steps), steps
    # From the second step on the pace is known: a duration, not "measuring".
    assert all(re.search(r" ETA \d+[smhd]", line) for line in steps[1:]), steps
    _in_order(lines, ["step 4/4", "run is finished; leaving", "stopped (run finished)"])
    assert "reconnecting" not in log


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


def test_a_fresh_machine_installs_the_peer_with_the_run_pages_line(tmp_path: Path) -> None:
    """The install line the run page shows gets this coordinator's own code; the peer it installs
    joins and trains. This machine has the dependencies and no package index, so only the package
    itself is installed (into a directory of its own, ahead of the checkout on the path)."""
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="installed", num_stages=1, max_steps=2)
        package = swarm.client.get("/api/peer-package").json()
        assert package["available"], package
        pip, install, requirement = shlex.split(package["install_command"])
        assert (pip, install) == ("pip", "install") and requirement.startswith("swarmhub[peer] @ http")
        site = tmp_path / "site"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--target",
                str(site),
                requirement,
            ],
            check=True,
            timeout=300,
        )
        env = swarm._env() | {"PYTHONPATH": str(site)}
        where = subprocess.run(
            [sys.executable, "-c", "import peer.cli; print(peer.cli.__file__)"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert where.stdout.strip() == str(site / "peer" / "cli.py")
        log_path = tmp_path / "installed.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "peer.cli",
                    "join",
                    swarm.url,
                    "--token",
                    swarm.token,
                    "--name",
                    "fresh",
                ],
                cwd=tmp_path,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            swarm.wait_for_steps(run["id"], 2, timeout_s=120)
            assert process.wait(timeout=60) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        log_text = log_path.read_text()
    assert f"[fresh] swarmhub-peer {package['version']} joining" in log_text
    assert "[fresh] run is finished; leaving" in log_text


def test_a_kicked_peer_says_so_and_does_not_claim_to_reconnect() -> None:
    with LocalSwarm() as swarm:
        run = swarm.create_run(name="kick", num_stages=1, max_steps=None)
        peer = swarm.start_peer()
        swarm.wait_for_steps(run["id"], 1, timeout_s=120)
        [row] = swarm.peer_rows(run["id"])
        response = swarm.client.post(f"/api/peers/{row['id']}/kick", json={"reason": "testing the words"})
        assert response.status_code == 200, response.text
        peer.process.wait(timeout=60)
        log = peer.log()
    lines = [line.removeprefix("[local-0] ") for line in log.splitlines() if line.startswith("[local-0] ")]
    _in_order(lines, ["serving stage 0", "removed by the coordinator: ", "stopped (kicked: "])
    assert "testing the words" in log
    assert "reconnect" not in log, log
