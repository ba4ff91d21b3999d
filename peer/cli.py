"""`swarmhub-peer join <coordinator-url> --token <join-token>`: the one line a participant runs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from pydantic import ValidationError

from swarmhub.settings import PeerSettings

from .control import Rejected
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
    join.add_argument("--listen-host", help="data-plane address to bind and announce (default 127.0.0.1)")
    join.add_argument("--listen-port", type=int, help="data-plane port (default: any free port)")
    join.add_argument("--slowdown", type=float, help="emulate a device this many times slower")
    join.add_argument("--upload-mbps", type=float, help="emulate an upload link of this many Mbit/s")
    join.add_argument(
        "--call-timeout", type=float, dest="call_timeout_s", help="seconds before a stage call is retried"
    )
    join.add_argument(
        "--no-trainer", dest="trainer", action="store_false", default=None, help="serve a stage only"
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
            "slowdown",
            "upload_mbps",
            "call_timeout_s",
            "trainer",
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
    runtime = PeerRuntime(args.url, args.token, settings, name=args.name)
    return asyncio.run(_run(runtime))


async def _run(runtime: PeerRuntime) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, runtime.stop, f"signal {signal.Signals(sig).name}")
    try:
        reason = await runtime.run()
    except Rejected as exc:
        print(f"swarmhub-peer: {exc}", file=sys.stderr)
        return 1
    print(f"swarmhub-peer: stopped ({reason})", flush=True)
    return 0 if reason.startswith(("signal", "run ")) else 1


if __name__ == "__main__":
    sys.exit(main())
