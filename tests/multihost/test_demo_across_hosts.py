"""`swarmhub demo --host ... --public-url ...` on one host prints a join line that a peer on another
host runs as printed: with one local peer and two stages the run can only step once that peer
serves the other stage, so steps prove the line works across hosts."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from launch.local_swarm import ADMIN_USERNAME, console_script
from tests.multihost.netns import Lan
from tests.training.swarm_helpers import WAIT_S, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]

PORT = 8000


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_demo_join_line_works_from_another_host(network: Lan, tmp_path: Path) -> None:
    coordinator, remote = network.add_host("coordinator"), network.add_host("peer-1")
    url = f"http://{coordinator.address}:{PORT}"
    demo_log = tmp_path / "demo.log"
    with demo_log.open("ab") as log:
        demo = network.popen(
            coordinator,
            [console_script("swarmhub"), "demo", "--keep-serving", "--peers", "1", "--stages", "2",
             "--host", coordinator.address, "--port", str(PORT), "--public-url", url],
            stdout=log,
        )  # fmt: skip
    peer: subprocess.Popen[bytes] | None = None
    try:
        wait_until("the demo's join line", lambda: "join from another machine: " in demo_log.read_text())
        text = demo_log.read_text()
        join_command = re.search(r"join from another machine: (.+)", text).group(1).strip()
        assert join_command.startswith(f"swarmhub-peer join {url} --token ")
        password = re.search(rf"sign in as '{ADMIN_USERNAME}' / '([^']+)'", text).group(1)

        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
        env = dict(os.environ, PATH=path, SWARMHUB_PEER_THREADS="1")
        with (tmp_path / "remote-peer.log").open("ab") as log:
            peer = network.popen(remote, shlex.split(join_command), stdout=log, env=env)

        with httpx.Client(base_url=url, timeout=30) as client:
            login = client.post("/api/auth/login", json={"username": ADMIN_USERNAME, "password": password})
            client.headers["Authorization"] = f"Bearer {login.json()['token']}"
            (run,) = client.get("/api/runs").json()

            def trained() -> bool:
                assert peer is not None and peer.poll() is None, (tmp_path / "remote-peer.log").read_text()
                return len(client.get(f"/api/runs/{run['id']}/steps").json()) >= 3

            wait_until("three steps with the remote peer", trained, timeout_s=WAIT_S)
            peers = client.get(f"/api/runs/{run['id']}/peers").json()
        addresses = sorted(p["address"].rsplit(":", 1)[0] for p in peers)
        # The demo's own peer joined through the public URL, so it too is dialled at the host's address.
        assert addresses == [coordinator.address, remote.address], peers
        assert sorted(p["stage"] for p in peers) == [0, 1], peers
    finally:
        if peer is not None:
            _stop(peer)
        _stop(demo)
