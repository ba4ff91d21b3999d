"""The square-cube law (Ryabinin et al., 2023): as the hidden size d grows, a pipeline stage's compute
grows like d^2 per token while the activations it sends grow like d, so the share of a step spent
communicating falls.

For each d, with the blocks per stage, sequence length and microbatch fixed: compute = measured
forward + backward time of one stage's blocks on this CPU; communication = time to send the stage's
output activations forward and receive their gradients back over a link of fixed bandwidth:
2 x (microbatch x seq_len x d x bytes per element) x 8 / bandwidth + 2 x latency, for float32 and
int8 (1 byte + one float32 absmax per 2048 elements). No overlap of compute and communication.

    .venv/bin/python -m bench.square_cube [--sizes 128,256,512,1024,2048] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from bench.report import RESULTS_DIR, print_table, write_results
from peer.compression import INT8_BLOCKSIZE
from peer.model import Block
from swarmhub.presets import ModelPreset

BYTES_PER_ELEMENT = {"float32": 4.0, "int8": 1.0 + 4.0 / INT8_BLOCKSIZE}


def stage_compute_s(d: int, blocks: int, microbatch: int, seq_len: int, iterations: int) -> float:
    """Mean seconds of forward + backward through `blocks` blocks of width d (one warm-up call first)."""
    preset = ModelPreset(name=f"d{d}", d_model=d, n_layer=blocks, n_head=max(1, d // 64), max_seq_len=seq_len)
    torch.manual_seed(0)
    stage = torch.nn.Sequential(*(Block(preset) for _ in range(blocks)))
    x = torch.randn(microbatch, seq_len, d, requires_grad=True)

    def call() -> None:
        stage(x).sum().backward()

    call()
    started = time.perf_counter()
    for _ in range(iterations):
        call()
    return (time.perf_counter() - started) / iterations


def comm_s(d: int, microbatch: int, seq_len: int, codec: str, mbps: float, latency_ms: float) -> float:
    payload = microbatch * seq_len * d * BYTES_PER_ELEMENT[codec]
    return 2 * (payload * 8 / (mbps * 1e6) + latency_ms / 1e3)


def iterations_for(d: int) -> int:
    return 5 if d <= 512 else 2 if d <= 1024 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.square_cube", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="128,256,512,1024,2048")
    parser.add_argument("--blocks", type=int, default=2, help="transformer blocks per stage")
    parser.add_argument("--microbatch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--mbps", type=float, default=500.0, help="link bandwidth, Mbit/s")
    parser.add_argument("--latency-ms", type=float, default=5.0, help="one-way latency per transfer")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="sizes 64 and 128 only")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    sizes = [64, 128] if args.smoke else [int(s) for s in args.sizes.split(",")]
    torch.set_num_threads(args.threads)

    rows: list[dict[str, Any]] = []
    for d in sizes:
        compute = stage_compute_s(d, args.blocks, args.microbatch, args.seq_len, iterations_for(d))
        row: dict[str, Any] = {"d_model": d, "compute_ms": compute * 1e3, "iterations": iterations_for(d)}
        for codec in BYTES_PER_ELEMENT:
            comm = comm_s(d, args.microbatch, args.seq_len, codec, args.mbps, args.latency_ms)
            row[f"comm_ms_{codec}"] = comm * 1e3
            row[f"comm_share_{codec}"] = comm / (comm + compute)
        rows.append(row)
        print(f"d={d}: compute {compute * 1e3:.1f} ms", flush=True)
    columns = [
        "d_model",
        "compute_ms",
        "comm_ms_float32",
        "comm_share_float32",
        "comm_ms_int8",
        "comm_share_int8",
    ]
    print_table(rows, columns)

    def plot(ax: Any) -> None:
        ds = [r["d_model"] for r in rows]
        for codec in BYTES_PER_ELEMENT:
            ax.plot(ds, [r[f"comm_share_{codec}"] for r in rows], "o-", label=f"communication share, {codec}")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1)
        ax.set_xlabel("hidden size d")
        ax.set_ylabel("share of step time")
        ax.set_title(
            f"{args.blocks} blocks/stage, microbatch {args.microbatch}x{args.seq_len}, "
            f"{args.mbps:g} Mbit/s + {args.latency_ms:g} ms"
        )
        ax.legend()

    path = write_results(
        "square_cube",
        config={
            "sizes": sizes,
            "blocks_per_stage": args.blocks,
            "microbatch": args.microbatch,
            "seq_len": args.seq_len,
            "mbps": args.mbps,
            "latency_ms": args.latency_ms,
            "threads": args.threads,
            "bytes_per_element": BYTES_PER_ELEMENT,
            "smoke": args.smoke,
        },
        rows=rows,
        plot=plot,
        out_dir=args.out,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
