"""`swarmhub-peer join <coordinator-url> --token <join-token>`: the one line a participant runs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from importlib import metadata
from typing import TYPE_CHECKING

from pydantic import ValidationError

from swarmhub.settings import PeerSettings

from .console import Console

if TYPE_CHECKING:
    from .runtime import PeerRuntime


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarmhub-peer", description="Join a SwarmHub training run.")
    sub = parser.add_subparsers(dest="command", required=True)
    join = sub.add_parser("join", help="join a run with a join token and train until stopped (Ctrl-C leaves)")
    join.add_argument("url", help="coordinator URL, e.g. http://127.0.0.1:8000")
    join.add_argument("--token", required=True, help="join token from the run's page")
    join.add_argument("--device", choices=["cpu", "cuda"], help="default: SWARMHUB_PEER_DEVICE or cpu")
    join.add_argument("--stage", help="'auto' (default) or a stage number")
    join.add_argument("--threads", type=int, help="torch threads for this peer")
    join.add_argument("--listen-host", help="data-plane address to bind (default 0.0.0.0: every interface)")
    join.add_argument("--listen-port", type=int, help="data-plane port to bind (default: any free port)")
    join.add_argument(
        "--announce",
        metavar="HOST[:PORT]",
        help="where other peers reach this one (a port forward, a container's service name); "
        "default: the address the coordinator sees this peer connect from, with the bound port",
    )
    join.add_argument(
        "--coordinator-ca",
        metavar="PEM",
        help="trust only this certificate for an https coordinator (self-signed); "
        "default: the system's store",
    )
    join.add_argument(
        "--data-plane-tls",
        action="store_true",
        default=None,
        help="serve the data plane over TLS even with an http coordinator (always on with https)",
    )
    join.add_argument("--slowdown", type=float, help="emulate a device this many times slower")
    join.add_argument(
        "--activation-cache-mb",
        type=float,
        help="memory for forwards kept until their backward (default 1024; 0: recompute every forward)",
    )
    join.add_argument("--upload-mbps", type=float, help="emulate an upload link of this many Mbit/s")
    join.add_argument(
        "--call-timeout", type=float, dest="call_timeout_s", help="seconds before a stage call is retried"
    )
    join.add_argument(
        "--no-trainer", dest="trainer", action="store_false", default=None, help="serve a stage only"
    )
    join.add_argument(
        "--data-dir",
        help="where the run's dataset shards are cached, or a copy of the coordinator's shards "
        "(each checked against its hash; default: ~/.cache/swarmhub/datasets)",
    )
    join.add_argument(
        "--max-memory",
        help="the most memory this peer may use, e.g. 16GiB: runs estimated larger are refused before"
        " anything is allocated (default: the device's free memory)",
    )
    join.add_argument(
        "--fault",
        help="TESTING AID: make this peer faulty on purpose to see the swarm catch and ban it: "
        "noise:FRACTION (noise on that share of its results), scale:FACTOR (its gradient "
        "contribution scaled), part:FACTOR (the butterfly part it sums scaled) or stale (never "
        "updates its weights)",
    )
    join.add_argument("--name", default="", help="name shown on the dashboard (default: host name)")
    join.add_argument("-v", "--verbose", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    overrides = {
        key: value
        for key in (
            "device",
            "stage",
            "threads",
            "listen_host",
            "listen_port",
            "announce",
            "slowdown",
            "activation_cache_mb",
            "upload_mbps",
            "call_timeout_s",
            "coordinator_ca",
            "data_plane_tls",
            "trainer",
            "data_dir",
            "max_memory",
            "fault",
        )
        if (value := getattr(args, key)) is not None
    }
    try:
        settings = PeerSettings(**overrides)
    except ValidationError as exc:
        print(f"swarmhub-peer: invalid option: {exc}", file=sys.stderr)
        return 2
    if settings.stage != "auto" and not settings.stage.isdigit():
        print(f"swarmhub-peer: --stage must be 'auto' or a number, got {settings.stage!r}", file=sys.stderr)
        return 2
    console = Console(args.name or socket.gethostname())
    # Importing torch takes seconds on a cold machine: say what is happening before it starts.
    console.say(f"swarmhub-peer {_version()} joining {args.url} on {settings.device}; loading torch…")
    from .faults import Fault
    from .runtime import PeerRuntime

    if settings.fault:
        try:
            Fault.parse(settings.fault)
        except ValueError as exc:
            print(f"swarmhub-peer: {exc}", file=sys.stderr)
            return 2
    runtime = PeerRuntime(args.url, args.token, settings, name=console.name, console=console)
    return asyncio.run(_run(runtime))


def _version() -> str:
    try:
        return metadata.version("swarmhub")
    except metadata.PackageNotFoundError:
        return "(source tree)"


async def _run(runtime: PeerRuntime) -> int:
    from .control import Rejected
    from .dataset_cache import DatasetError
    from .fits import RunDoesNotFit
    from .registration import RegistrationRefused

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, runtime.stop, f"signal {signal.Signals(sig).name}")
    try:
        reason = await runtime.run()
    except (Rejected, RegistrationRefused, DatasetError, RunDoesNotFit) as exc:
        print(f"swarmhub-peer: {exc}", file=sys.stderr)
        return 1
    runtime.console.say(f"stopped ({reason})")
    return 0 if reason.startswith(("signal", "run ")) else 1


if __name__ == "__main__":
    sys.exit(main())
