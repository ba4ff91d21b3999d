"""The namespace LAN itself: hosts reach each other by their own addresses, a firewalled host can
connect out but accepts no connection, an egress limit is in place, and nothing is left behind."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.multihost.netns import SUBNET, Lan, _ip, available, lan
from tests.required import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LISTEN = """
import socket, sys
server = socket.create_server(("0.0.0.0", 7000))
print("listening", flush=True)
connection, (host, _) = server.accept()
connection.sendall(host.encode())
connection.close()
"""
CONNECT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], 7000), timeout=3) as s:
        print(s.recv(100).decode())
except OSError as exc:
    print(f"refused or dropped: {type(exc).__name__}")
"""


def _serve(network: Lan, host_name: str) -> subprocess.Popen[bytes]:
    server = network.popen(network.hosts[host_name], [sys.executable, "-c", LISTEN], stdout=subprocess.PIPE)
    assert server.stdout is not None and server.stdout.readline() == b"listening\n"
    return server


def _connect(network: Lan, from_name: str, to_name: str) -> str:
    target = network.hosts[to_name].address
    return network.run(network.hosts[from_name], [sys.executable, "-c", CONNECT, target]).stdout.strip()


def test_hosts_see_each_other_by_their_own_addresses(network: Lan) -> None:
    network.add_host("a")
    network.add_host("b")
    assert [h.address for h in network.hosts.values()] == [f"{SUBNET}.1", f"{SUBNET}.2"]
    server = _serve(network, "b")
    try:
        # The server reports the address the connection came from: a's own, not loopback.
        assert _connect(network, "a", "b") == network.hosts["a"].address
    finally:
        server.kill()
        server.wait()


def test_a_firewalled_host_connects_out_but_accepts_nothing(network: Lan) -> None:
    network.add_host("open")
    network.add_host("walled")
    network.drop_inbound_connections(network.hosts["walled"])
    server = _serve(network, "open")
    try:
        assert _connect(network, "walled", "open") == network.hosts["walled"].address
    finally:
        server.kill()
        server.wait()
    server = _serve(network, "walled")
    try:
        assert _connect(network, "open", "walled") == "refused or dropped: TimeoutError"
    finally:
        server.kill()
        server.wait()


def test_egress_limit_is_a_token_bucket(network: Lan) -> None:
    host = network.add_host("slow", egress_mbit=50)
    qdisc = network.run(host, ["tc", "qdisc", "show", "dev", "eth0"]).stdout
    assert "tbf" in qdisc and "50Mbit" in qdisc, qdisc


def test_setup_removes_what_a_crashed_run_left() -> None:
    reason = available()
    if reason is not None:
        unavailable(reason)
    with lan(prefix="swhx") as crashed:
        crashed.add_host("stale")
        # A second LAN of the same names, as a rerun after a crash would make: setup clears the rest.
        rerun = Lan(prefix="swhx")
        rerun.setup()
        assert rerun._namespaces() == []
        rerun.add_host("fresh")
        assert rerun._namespaces() == ["swhx-fresh"]
    assert "swhx-" not in _ip("-o", "link", "show").stdout
    assert "swhx-" not in _ip("netns", "list").stdout
