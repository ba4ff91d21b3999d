"""`swarmhub demo`: a coordinator on a temporary SQLite file and N local CPU peers training a small LM.

The coordinator listens on loopback unless given --host (0.0.0.0: every interface) and
--public-url (the URL other machines reach it at, which the join line names).

With --json, one JSON object is printed last (loss_first, loss_last, steps, samples_per_s, peers,
failures, rebalances, ...). With --keep-serving the dashboard stays up and training goes on until
Ctrl-C, which stops the peers and the coordinator.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from launch.local_swarm import ADMIN_USERNAME, LocalSwarm

FRONTEND_DIST = Path(__file__).resolve().parents[1] / "frontend" / "dist"
OPEN_UP = "swarmhub demo --keep-serving --host 0.0.0.0 --public-url http://<this machine's address>:8000"


def join_lines(host: str, public_url: str, join_command: str, install_command: str = "") -> list[str]:
    """What the demo says about joining from elsewhere: the run page's join command (and the line that
    installs the peer on a fresh machine), and whether another machine can use it (not while the
    coordinator listens on loopback only)."""
    if not public_url and (host == "localhost" or host == "::1" or host.startswith("127.")):
        return [
            f"join another peer on this machine: {join_command}",
            f"the demo listens on loopback ({host}) only, so other machines cannot join; "
            f"to open it up: {OPEN_UP}",
        ]
    lines = [f"install the peer on another machine: {install_command}"] if install_command else []
    lines.append(f"join from another machine: {join_command}")
    if not public_url and host in ("0.0.0.0", "::"):
        lines.append(f"(it names this machine's host name; if others cannot resolve it: {OPEN_UP})")
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarmhub demo", description=__doc__)
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument(
        "--steps", type=int, default=30, help="global steps to train (ignored with --keep-serving)"
    )
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per global step")
    parser.add_argument("--microbatch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--compression", choices=["none", "float16", "int8"], default="none")
    parser.add_argument(
        "--port", type=int, default=0, help="coordinator port (default: 8000 with --keep-serving)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="coordinator address to listen on (0.0.0.0: every interface)"
    )
    parser.add_argument("--public-url", default="", help="URL other machines reach the coordinator at")
    parser.add_argument(
        "--keep-serving", action="store_true", help="leave the dashboard up and keep training"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary last")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    return parser


def summarize(swarm: LocalSwarm, run_id: int, started: float, peers: int) -> dict[str, Any]:
    steps = swarm.steps(run_id)
    events = swarm.events(run_id)
    losses = [s["loss"] for s in steps if s["loss"] is not None]
    samples = sum(s["samples_sent"] - s["samples_lost"] for s in steps)
    training_s = sum(s["duration_s"] for s in steps)
    return {
        "run_id": run_id,
        "steps": len(steps),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "samples": samples,
        "samples_per_s": samples / training_s if training_s else 0.0,
        "peers": peers,
        "failures": sum(1 for e in events if e["kind"] == "peer_lost"),
        "retries": int(sum(m["value"] for m in swarm.metrics(run_id, "retries"))),
        "wire_bytes_per_step": (
            sum(m["value"] for m in swarm.metrics(run_id, "wire_bytes")) / len(steps) if steps else 0.0
        ),
        "samples_lost": sum(s["samples_lost"] for s in steps),
        "rebalances": sum(1 for e in events if e["kind"] == "rebalance"),
        "wall_s": time.monotonic() - started,
        "workdir": str(swarm.workdir),
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    port = args.port or (8000 if args.keep_serving else 0)
    frontend = FRONTEND_DIST if (FRONTEND_DIST / "index.html").exists() else None
    swarm = LocalSwarm(port=port, host=args.host, public_url=args.public_url, frontend_dir=frontend)
    started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        swarm.start()
        run = swarm.create_run(
            name=f"demo: {args.preset}, {args.stages} stages, {args.peers} peers",
            model_preset=args.preset,
            num_stages=args.stages,
            target_batch_size=args.batch_size,
            microbatch_size=args.microbatch_size,
            seq_len=args.seq_len,
            learning_rate=args.learning_rate,
            compression=args.compression,
            max_steps=None if args.keep_serving else args.steps,
        )
        for _ in range(args.peers):
            swarm.start_peer()
        if args.keep_serving:
            print(
                f"dashboard: {swarm.url}  (sign in as {ADMIN_USERNAME!r} / {swarm.admin_password!r})",
                flush=True,
            )
            package = swarm.client.get("/api/peer-package").json()
            install = package["install_command"] if package["available"] else ""
            for line in join_lines(args.host, args.public_url, swarm.join_command, install):
                print(line, flush=True)
            print("training; Ctrl-C stops the peers and the coordinator", flush=True)
            while True:
                time.sleep(5)
                detail = swarm.run_detail(run["id"])
                print(f"step {detail['current_step']}  loss {detail.get('latest_loss')}", flush=True)
        swarm.wait_for_steps(run["id"], args.steps, timeout_s=args.timeout)
        result = summarize(swarm, run["id"], started, args.peers)
    except KeyboardInterrupt:
        return 0
    finally:
        swarm.stop()
    if args.json:
        print(json.dumps(result), flush=True)
    else:
        for key, value in result.items():
            print(f"{key:>14}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
