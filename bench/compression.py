"""Compression: the same SwarmHub run with activations and gradients sent as float32, float16 or int8.

For each codec, in one run: data-plane bytes per global step (the run's 'wire_bytes' metric: the
trainers' stage calls), the bytes gradient averaging adds per step (real push frames, counted), the
size of one forward frame carrying a demo-shaped activation (peer.frames.encode_frame), the loss
after a fixed number of steps, and the codec's reconstruction error on that activation (seeded:
the activation is stage 0's output on the first microbatch of the bundled corpus).

    .venv/bin/python -m bench.compression [--steps 20] [--peers 4] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from bench.baselines import TrainConfig
from bench.pipeline import Scenario, run_swarm
from bench.report import RESULTS_DIR, print_table, write_results
from peer.averaging import contribution_frame
from peer.compression import get_codec
from peer.data import SampleSource
from peer.frame_headers import ForwardCall, PushGrads
from peer.frames import encode_frame
from peer.model import build_stage
from server.datasets.store import stdlib_corpus
from swarmhub.presets import get_preset

CODEC_NAMES = ("none", "float16", "int8")


def demo_activation(cfg: TrainConfig) -> torch.Tensor:
    """Stage 0's output [microbatch, seq_len, d_model] on the run's first microbatch."""
    source = SampleSource(
        stdlib_corpus(), cfg.seq_len, cfg.seed, token_bytes=get_preset(cfg.preset).token_bytes
    )
    inputs, _ = source.batch(0, cfg.microbatch_size)
    with torch.no_grad():
        return build_stage(get_preset(cfg.preset), 0, cfg.num_stages, cfg.seed)(inputs)


def frame_bytes(activation: torch.Tensor, codec: str) -> int:
    header = ForwardCall(
        run_id=1,
        sender=1,
        stage=1,
        step=0,
        microbatch_id="1:0",
        samples=activation.shape[0],
        timeout_s=30.0,
    )
    return len(encode_frame(header, {"x": activation}, codec))


def averaging_bytes_per_step(cfg: TrainConfig, codec: str, peers: int) -> int:
    """Bytes a step's gradient averaging moves: each of a stage's k members sends its sum, a real
    push frame of the stage's size (`contribution_frame`, counting its share of the step's
    microbatches), to the k - 1 others. Peers are spread evenly over the stages, as the
    coordinator places a homogeneous swarm (any remainder on the first stages)."""
    preset = get_preset(cfg.preset)
    microbatches = cfg.batch_size // cfg.microbatch_size
    total = 0
    for stage in range(cfg.num_stages):
        members = peers // cfg.num_stages + (1 if stage < peers % cfg.num_stages else 0)
        size = sum(p.numel() for p in build_stage(preset, stage, cfg.num_stages, cfg.seed).parameters())
        grads = torch.randn(size, generator=torch.Generator().manual_seed(stage))
        for member in range(members):
            header = PushGrads(
                run_id=1,
                sender=member + 1,
                stage=stage,
                step=100,
                attempt=0,
                counted=[f"100:{i}" for i in range(member, microbatches, members)],
            )
            frame, _ = contribution_frame(header, grads, codec)
            total += len(frame) * (members - 1)
    return total


def reconstruction(activation: torch.Tensor, codec_name: str, repeats: int) -> dict[str, float]:
    codec = get_codec(codec_name)
    started = time.perf_counter()
    for _ in range(repeats):
        data = codec.encode(activation)
        decoded = codec.decode(data, list(activation.shape), activation.dtype)
    seconds = (time.perf_counter() - started) / repeats
    error = decoded - activation
    return {
        "payload_bytes": len(data),
        "bytes_per_element": len(data) / activation.numel(),
        "rel_l2_error": float(error.norm() / activation.norm()),
        "max_abs_error": float(error.abs().max()),
        "encode_decode_ms": seconds * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compression", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="2 peers, 2 steps per codec")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    steps, warmup, peers = (2, 0, 2) if args.smoke else (args.steps, args.warmup, args.peers)
    cfg = TrainConfig(preset=args.preset, num_stages=args.stages, max_steps=steps)

    torch.manual_seed(0)
    activation = demo_activation(cfg)
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for codec in CODEC_NAMES:
        run = run_swarm(
            cfg, Scenario(name=f"compression {codec}", peers=peers, compression=codec), steps, warmup
        )
        runs.append(run)
        wire = [w for w in run["wire_bytes_per_step"][warmup:] if w is not None]
        stage_calls = statistics.fmean(wire) if wire else None
        averaging = averaging_bytes_per_step(cfg, codec, peers)
        rows.append(
            {
                "codec": codec,
                "wire_bytes_per_step": stage_calls,
                "averaging_bytes_per_step": averaging,
                "total_bytes_per_step": stage_calls + averaging if stage_calls is not None else None,
                "frame_bytes": frame_bytes(activation, codec),
                f"loss_after_{steps}_steps": run["losses"][-1],
                "samples_per_s": run["samples_per_s"],
                **reconstruction(activation, codec, repeats=3 if args.smoke else 20),
            }
        )
    base = rows[0]["wire_bytes_per_step"]
    base_total = rows[0]["total_bytes_per_step"]
    for row in rows:
        row["wire_vs_none"] = (
            row["wire_bytes_per_step"] / base if base and row["wire_bytes_per_step"] else None
        )
        row["total_vs_none"] = (
            row["total_bytes_per_step"] / base_total if base_total and row["total_bytes_per_step"] else None
        )
    columns = [
        "codec",
        "wire_bytes_per_step",
        "wire_vs_none",
        "averaging_bytes_per_step",
        "total_bytes_per_step",
        "total_vs_none",
        "frame_bytes",
        f"loss_after_{steps}_steps",
        "samples_per_s",
        "bytes_per_element",
        "rel_l2_error",
        "max_abs_error",
        "encode_decode_ms",
    ]
    print(f"activation {list(activation.shape)} float32 ({activation.numel() * 4} bytes raw)")
    print_table(rows, columns)

    def plot(ax: Any) -> None:
        for row, run in zip(rows, runs, strict=True):
            ax.plot(run["losses"], label=f"{row['codec']}: {row['wire_bytes_per_step'] or 0:,.0f} B/step")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        ax.set_title(f"{cfg.preset}, {peers} peers, {cfg.num_stages} stages: loss and wire bytes by codec")
        ax.legend()

    path = write_results(
        "compression",
        config={
            **asdict(cfg),
            "steps": steps,
            "warmup": warmup,
            "peers": peers,
            "activation_shape": list(activation.shape),
            "smoke": args.smoke,
        },
        rows=[*rows, {"codec": "details", "runs": runs}],
        plot=plot,
        out_dir=args.out,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
