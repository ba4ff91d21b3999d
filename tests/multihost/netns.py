"""Hosts on one LAN, made of Linux network namespaces: a test's stand-in for separate machines.

Each host is a namespace with loopback up and one veth interface (`eth0`) whose other end is on a
bridge in the root namespace; the root namespace has the LAN's gateway address on that bridge, so
the test process itself can reach every host (the coordinator's API) the way a browser would.
Only addresses in 10.250.0.0/24 are used. One LAN exists at a time on a machine (a file lock),
because every LAN uses that subnet: a second test or benchmark waits for the first to tear down.

Needs root and iproute2 (`ip`, `tc`). `available()` says why a LAN cannot be made here.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SUBNET = "10.250.0"
PREFIX_LENGTH = 24
GATEWAY = f"{SUBNET}.254"
"""The root namespace's address on the bridge (where the test process talks from)."""
LOCK_PATH = Path("/tmp/swarmhub-netns.lock")
INTERFACE = "eth0"
BLACKHOLE = "blackhole"
"""A veth end left down inside a firewalled host: packets redirected to it are dropped."""


class NetnsError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def available() -> str | None:
    """None when namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs the tests as root)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed: apt-get install iproute2"
    probe = "swh-probe-ns"
    _ip("netns", "del", probe, check=False)
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Host:
    """One machine: its own network namespace and address on the LAN."""

    name: str
    namespace: str
    address: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass
class Lan:
    """A bridge and hosts on it. Use `lan()` (a context manager) so it is always torn down."""

    prefix: str = "swh"
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    def _namespaces(self) -> list[str]:
        listed = _ip("netns", "list").stdout.splitlines()
        return [line.split()[0] for line in listed if line.startswith(f"{self.prefix}-")]

    def teardown(self) -> None:
        """Remove every namespace and link of this prefix, also those a crashed run left behind."""
        for namespace in self._namespaces():
            _ip("netns", "del", namespace, check=False)
        links = _ip("-o", "link", "show").stdout.splitlines()
        for line in links:
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith(f"{self.prefix}-"):
                _ip("link", "del", name, check=False)
        self.hosts.clear()

    def setup(self) -> None:
        self.teardown()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{GATEWAY}/{PREFIX_LENGTH}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add_host(self, name: str, *, egress_mbit: float | None = None) -> Host:
        """A new host with the next free address (10.250.0.1, .2, ...)."""
        index = len(self.hosts) + 1
        if index >= 254:
            raise NetnsError("the LAN is full")
        host = Host(name=name, namespace=f"{self.prefix}-{name}", address=f"{SUBNET}.{index}")
        outside, inside = f"{self.prefix}-v{index}", f"{self.prefix}-i{index}"
        _ip("netns", "add", host.namespace)
        self.hosts[name] = host
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("link", "set", inside, "netns", host.namespace)
        inner = ("-n", host.namespace)
        _ip(*inner, "link", "set", inside, "name", INTERFACE)
        _ip(*inner, "addr", "add", f"{host.address}/{PREFIX_LENGTH}", "dev", INTERFACE)
        _ip(*inner, "link", "set", INTERFACE, "up")
        _ip(*inner, "link", "set", "lo", "up")
        if egress_mbit is not None:
            self.limit_egress(host, egress_mbit)
        return host

    def run(self, host: Host, argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(host.command(argv), capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise NetnsError(f"{host.name}: {' '.join(argv)}: {result.stderr.strip()}")
        return result

    def popen(
        self, host: Host, argv: Sequence[str], *, stdout: IO[bytes], **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """A process inside `host` (ended by the caller; the namespace's removal does not end it)."""
        return subprocess.Popen(host.command(argv), stdout=stdout, stderr=subprocess.STDOUT, **kwargs)

    def limit_egress(self, host: Host, mbit: float) -> None:
        """Cap what `host` sends to `mbit` Mbit/s (token bucket on its interface)."""
        rate_bytes = mbit * 1e6 / 8
        # The bucket must hold at least one timer tick's worth at the rate; 10 ms is ample.
        burst = max(int(rate_bytes / 100), 16 * 1024)
        self.run(
            host,
            ["tc", "qdisc", "replace", "dev", INTERFACE, "root", "tbf",
             "rate", f"{mbit}mbit", "burst", str(burst), "latency", "200ms"],
        )  # fmt: skip

    def drop_inbound_connections(self, host: Host) -> None:
        """Drop every TCP SYN (without ACK) addressed to `host`, as a home router does: the host can
        still connect out, nobody can connect in.

        This kernel lacks the gact (drop) action, so matching packets are redirected to an
        interface that is down, which drops them."""
        self.run(host, ["ip", "link", "add", BLACKHOLE, "type", "veth", "peer", "name", f"{BLACKHOLE}-2"])
        self.run(host, ["tc", "qdisc", "add", "dev", INTERFACE, "handle", "ffff:", "ingress"])
        self.run(
            host,
            ["tc", "filter", "add", "dev", INTERFACE, "parent", "ffff:", "protocol", "ip", "prio", "1",
             "u32",
             "match", "ip", "dst", f"{host.address}/32",
             "match", "ip", "protocol", "6", "0xff",
             # A 20-byte IP header (IHL 5), then the TCP flags at byte 13: SYN set, ACK clear.
             "match", "u8", "0x05", "0x0f", "at", "0",
             "match", "u8", "0x02", "0x12", "at", "33",
             "action", "mirred", "egress", "redirect", "dev", BLACKHOLE],
        )  # fmt: skip


@contextmanager
def lan(prefix: str = "swh") -> Iterator[Lan]:
    """A LAN for the duration of the block, torn down however the block ends."""
    LOCK_PATH.touch(exist_ok=True)
    with LOCK_PATH.open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        network = Lan(prefix=prefix)
        try:
            network.setup()
            yield network
        finally:
            network.teardown()
