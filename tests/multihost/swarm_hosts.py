"""A coordinator and peers on separate hosts of a namespace LAN, started as participants would be."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from launch.local_swarm import LocalSwarm, PeerProcess
from tests.multihost.netns import Host, Lan

COORDINATOR_PORT = 8000


@dataclass
class HostedSwarm:
    network: Lan
    swarm: LocalSwarm
    coordinator: Host

    @classmethod
    def start(cls, network: Lan, workdir: Path) -> HostedSwarm:
        """`swarmhub serve --host 10.250.0.1` inside a host of its own."""
        coordinator = network.add_host("coordinator")
        swarm = LocalSwarm(
            workdir=workdir,
            host=coordinator.address,
            port=COORDINATOR_PORT,
            launcher=tuple(coordinator.command([])),
        )
        try:
            swarm.start()
        except BaseException:
            swarm.stop()
            raise
        return cls(network=network, swarm=swarm, coordinator=coordinator)

    def join(self, host: Host, join_command: str, *extra: str) -> PeerProcess:
        """Run `join_command` inside `host` word for word (`extra` options after it), as a participant
        who pasted it into a shell whose PATH has the installed `swarmhub-peer`."""
        words = shlex.split(join_command)
        assert words[:2] == ["swarmhub-peer", "join"], join_command
        env = self.swarm._env()
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        index = len(self.swarm.peers)
        log_path = self.swarm.workdir / f"peer-{index}-{host.name}.log"
        with log_path.open("ab") as log:
            process = self.network.popen(host, [*words, *extra], stdout=log, env=env)
        peer = PeerProcess(index=index, process=process, log_path=log_path, options=[host.name, *extra])
        self.swarm.peers.append(peer)
        return peer
