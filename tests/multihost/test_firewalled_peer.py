"""A participant behind a firewall that drops inbound connections (as a home router does) still
contributes: the coordinator's probe of its data plane fails, so it is told so in plain words and
never gets a stage, while its trainer drives microbatches through the other hosts' stage peers.
The run keeps stepping (no join-evict-rejoin loop), every step's books balance."""

from __future__ import annotations

import re

import pytest

from launch.local_swarm import PeerProcess
from tests.multihost.netns import Lan
from tests.multihost.swarm_hosts import HostedSwarm
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S, assert_books_balance, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

MORE_STEPS = 3


def _trained(peer: PeerProcess) -> int:
    """Samples its trainer had driven through the pipeline at its last progress line."""
    counts = re.findall(r"training only\s.*?trained (\d+) samples", peer.log())
    return int(counts[-1]) if counts else 0


def test_firewalled_peer_trains_only_and_the_run_keeps_stepping(network: Lan, tmp_path) -> None:
    hosted = HostedSwarm.start(network, tmp_path)
    swarm = hosted.swarm
    try:
        run = swarm.create_run(name="behind a firewall", max_steps=None, **DEMO_RUN)
        open_hosts = [network.add_host(f"peer-{i}") for i in (1, 2)]
        walled_host = network.add_host("walled")
        network.drop_inbound_connections(walled_host)
        for host in open_hosts:
            hosted.join(host, swarm.join_command)
        walled = hosted.join(walled_host, swarm.join_command)

        wait_until("the walled peer's trainer to contribute", lambda: _trained(walled) > 0, timeout_s=WAIT_S)
        contributed_at = len(swarm.steps(run["id"]))
        steps = swarm.wait_for_steps(run["id"], contributed_at + MORE_STEPS, timeout_s=WAIT_S)
        events = swarm.events(run["id"])
        assert_books_balance(steps, events, DEMO_RUN["num_stages"])

        rows = {row["address"].rsplit(":", 1)[0]: row for row in swarm.peer_rows(run["id"])}
        assert set(rows) == {h.address for h in [*open_hosts, walled_host]}, rows
        walled_row = rows[walled_host.address]
        assert walled_row["stage"] is None and walled_row["state"] not in ("lost", "left"), walled_row
        assert sorted(rows[h.address]["stage"] for h in open_hosts) == [0, 1], rows

        # Told in plain words, once found unreachable never assigned, never sent away and back.
        log = walled.log()
        port = walled_row["address"].rsplit(":", 1)[1]
        assert f"your port {port} is not reachable from the coordinator" in log, swarm.logs()
        assignments = swarm.client.get(f"/api/runs/{run['id']}/assignments")
        assignments.raise_for_status()
        assert walled_row["id"] not in {a["peer_id"] for a in assignments.json()}, assignments.json()
        mine = [e for e in events if e.get("peer_id") == walled_row["id"]]
        assert "peer_trainer_only" in {e["kind"] for e in mine}, mine
        assert "peer_lost" not in {e["kind"] for e in mine}, mine
        assert walled.alive() and _trained(walled) > 0, swarm.logs()
    finally:
        swarm.stop()
