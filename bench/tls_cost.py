"""The cost of TLS on the data plane, on loopback: the same calls over ws and over pinned wss.

Two frame servers in other processes, one plain and one serving a generated certificate (as a peer
with a TLS data plane does), measured in turns with the real code of `bench.transport`: (a) a stage
call's communication for activations of the run's shape (encode, send, remote decode and encode of
a same-size reply, receive, decode), and (b) raw frames of random bytes answered by a 2-byte ack.
Each row pairs the two transports; `tls_over_plain` is the ratio of medians (time for calls, and
plain over TLS throughput for frames, so above 1 is what TLS costs in both).

    .venv/bin/python -m bench.tls_cost [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, print_table, write_results
from bench.transport import RemoteServer, hop_round_trips, percentile, raw_throughput
from swarmhub.tls import generate_certificate

# (preset, microbatch, seq_len, d_model): the demo's shape first, then larger models' activations.
HOP_CASES = [("tiny", 8, 64, 64), ("small", 8, 256, 256), ("medium", 8, 256, 512)]
SMOKE_HOP_CASES = [("tiny", 8, 64, 64)]
THROUGHPUT_MB = [4, 16, 64]
SMOKE_THROUGHPUT_MB = [1]
ROUNDS = 3
"""Each case is measured in this many alternating rounds per transport, so drift on a shared
machine falls on both alike."""


def _measure(servers: dict[str, RemoteServer], run: Any) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in servers}
    for _ in range(ROUNDS):
        for name, server in servers.items():
            times[name] += asyncio.run(run(server))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    hop_cases = SMOKE_HOP_CASES if args.smoke else HOP_CASES
    sizes_mb = SMOKE_THROUGHPUT_MB if args.smoke else THROUGHPUT_MB
    hop_reps = 5 if args.smoke else 30
    servers = {"ws": RemoteServer(), "wss": RemoteServer(certificate=generate_certificate())}
    rows: list[dict[str, Any]] = []
    try:
        for preset, microbatch, seq_len, d_model in hop_cases:
            activation = torch.randn(microbatch, seq_len, d_model, generator=torch.Generator().manual_seed(0))
            for codec in ("none", "int8"):
                print(f"hop: {preset} seq={seq_len} {codec}...", flush=True)
                times = _measure(
                    servers,
                    lambda server, a=activation, c=codec: hop_round_trips(server, a, c, hop_reps),
                )
                plain, tls = statistics.median(times["ws"]), statistics.median(times["wss"])
                rows.append(
                    {
                        "part": "hop",
                        "case": f"{preset} seq {seq_len} {codec}",
                        "frame_bytes": activation.numel() * (4 if codec == "none" else 1),
                        "plain_p50_ms": plain * 1e3,
                        "tls_p50_ms": tls * 1e3,
                        "plain_p90_ms": percentile(times["ws"], 90) * 1e3,
                        "tls_p90_ms": percentile(times["wss"], 90) * 1e3,
                        "tls_over_plain": tls / plain,
                    }
                )
        for megabytes in sizes_mb:
            reps = 3 if args.smoke else max(4, 48 // megabytes)
            print(f"throughput: {megabytes} MB x {reps}...", flush=True)
            times = _measure(servers, lambda server, m=megabytes, r=reps: raw_throughput(server, m, r))
            plain, tls = statistics.median(times["ws"]), statistics.median(times["wss"])
            rows.append(
                {
                    "part": "throughput",
                    "case": f"{megabytes} MB frames",
                    "frame_bytes": megabytes * 1024 * 1024,
                    "plain_mb_per_s": megabytes / plain,
                    "tls_mb_per_s": megabytes / tls,
                    "plain_p50_ms": plain * 1e3,
                    "tls_p50_ms": tls * 1e3,
                    "tls_over_plain": tls / plain,
                }
            )
    finally:
        for server in servers.values():
            server.stop()

    print_table(
        [r for r in rows if r["part"] == "hop"],
        ["case", "frame_bytes", "plain_p50_ms", "tls_p50_ms", "plain_p90_ms", "tls_p90_ms", "tls_over_plain"],
    )
    print()
    print_table(
        [r for r in rows if r["part"] == "throughput"],
        ["case", "plain_mb_per_s", "tls_mb_per_s", "plain_p50_ms", "tls_p50_ms", "tls_over_plain"],
    )

    def plot(ax: Any) -> None:
        ax.bar(
            range(len(rows)),
            [r["tls_over_plain"] for r in rows],
            color=["C0" if r["part"] == "hop" else "C2" for r in rows],
        )
        ax.set_xticks(range(len(rows)), [r["case"].replace(" ", "\n", 1) for r in rows], fontsize=7)
        ax.set_ylabel("TLS / plain (median time)")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_title("Data plane: pinned wss vs ws on loopback (blue: stage calls, green: raw frames)")

    config = {
        "smoke": args.smoke,
        "hop_cases": hop_cases,
        "throughput_mb": sizes_mb,
        "hop_reps": hop_reps,
        "rounds": ROUNDS,
        "cpus": len(os.sched_getaffinity(0)),
        "tls": "TLS 1.2+ with the peer's generated P-256 certificate, client pins its SHA-256",
    }
    name = "tls_cost_smoke" if args.smoke else "tls_cost"
    path = write_results(name, config=config, rows=rows, plot=plot, out_dir=args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
