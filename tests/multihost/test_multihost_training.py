"""Participants on separate hosts: the coordinator and each peer in a network namespace of its own,
each peer started with the join command exactly as the run page shows it, train a 2-stage run."""

from __future__ import annotations

import re

import pytest

from tests.multihost.netns import Lan
from tests.multihost.swarm_hosts import COORDINATOR_PORT, HostedSwarm
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S, assert_books_balance

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]

STEPS = 4


def test_join_command_as_shown_trains_across_hosts(network: Lan, tmp_path) -> None:
    hosted = HostedSwarm.start(network, tmp_path)
    swarm = hosted.swarm
    try:
        run = swarm.create_run(name="multi-host", max_steps=None, **DEMO_RUN)
        # The command the dashboard's join panel shows is the API's `join_command`, verbatim.
        join_command = swarm.join_command
        assert join_command.startswith(
            f"swarmhub-peer join http://{hosted.coordinator.address}:{COORDINATOR_PORT} "
        )
        hosts = [network.add_host(f"peer-{i}") for i in (1, 2)]
        peers = [hosted.join(host, join_command) for host in hosts]
        steps = swarm.wait_for_steps(run["id"], STEPS, timeout_s=WAIT_S)
        assert_books_balance(steps, swarm.events(run["id"]), DEMO_RUN["num_stages"])

        # Each peer was told, and recorded as, its own host's address: what the others dial.
        for host, peer in zip(hosts, peers, strict=True):
            announced = re.search(r"announced as (\S+)$", peer.log(), re.MULTILINE)
            assert announced is not None, swarm.logs()
            assert announced.group(1).rsplit(":", 1)[0] == host.address, swarm.logs()
        rows = swarm.peer_rows(run["id"])
        recorded = sorted(row["address"].rsplit(":", 1)[0] for row in rows)
        assert recorded == sorted(host.address for host in hosts), rows
        assert sorted(row["stage"] for row in rows) == [0, 1], rows
    finally:
        swarm.stop()
