"""Data-plane overhead: what one stage call costs on the wire next to what it costs in compute.

(a) Hop vs compute. For a microbatch of the run's shape, a stage call moves one activation tensor
    [microbatch, seq, d_model] to a peer and one tensor of the same shape back (the forward's
    output, or the backward's input gradient). We time that round trip end to end with the real
    code: `encode_frame` (codec none or int8) -> `FramePool.request` over a loopback websocket ->
    `FrameServer` in another process, whose handler runs `decode_frame` and `encode_frame` on the
    reply -> `decode_frame` on the caller. Next to it, the compute of one stage of a 2-stage model
    for that microbatch with `StageWorker`: stage 0 = forward call + backward call (which
    recomputes the forward), stage 1 (last) = forward_backward (with the head and loss). torch
    uses one thread, as the demo's peers do (SWARMHUB_PEER_THREADS=1).
(b) Raw loopback throughput of the data plane: frames of 4, 16 and 64 MB of bytes from a
    `FramePool` to a `FrameServer` (other process) whose handler answers a 2-byte ack.

    .venv/bin/python -m bench.transport [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, print_table, write_results
from swarmhub.tls import DataPlaneCertificate

MAX_FRAME_BYTES = 80 * 1024 * 1024 + (1 << 20)
ACK = b"ok"

# (preset, microbatch, seq_len): the demo's shape first, then larger models.
HOP_CASES = [("tiny", 8, 64), ("small", 8, 256), ("medium", 8, 256)]
SMOKE_HOP_CASES = [("tiny", 8, 64)]
THROUGHPUT_MB = [4, 16, 64]
SMOKE_THROUGHPUT_MB = [1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


# ---- the remote side: a FrameServer in its own process ---------------------------------------


def _serve(port_pipe: Any, threads: int, certificate: DataPlaneCertificate | None) -> None:
    import torch

    torch.set_num_threads(threads)
    asyncio.run(_serve_async(port_pipe, certificate))


async def _serve_async(port_pipe: Any, certificate: DataPlaneCertificate | None) -> None:
    from peer.frame_headers import ForwardReply
    from peer.frames import MAGIC, decode_frame, encode_frame
    from peer.transport import FrameServer, UploadPacer

    async def handler(data: bytes) -> bytes:
        if not data.startswith(MAGIC):
            return ACK
        header, tensors = decode_frame(data, max_bytes=MAX_FRAME_BYTES)
        # Answer with a tensor of the same shape (as a forward output or an input gradient would be).
        return encode_frame(
            ForwardReply(run_id=header.run_id, sender=0), {"grad": tensors["x"]}, header.tensors[0].codec
        )

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    server = FrameServer(
        handler,
        max_bytes=MAX_FRAME_BYTES,
        pacer=UploadPacer(None),
        answer_text=lambda _: None,
        ssl_context=None if certificate is None else certificate.server_context(),
    )
    await server.start(listener)
    port_pipe.send(listener.getsockname()[1])
    await asyncio.Event().wait()


class RemoteServer:
    """A frame server in another process; over TLS with `certificate` (callers pin `fingerprint`)."""

    def __init__(self, threads: int = 1, certificate: DataPlaneCertificate | None = None) -> None:
        self.fingerprint = "" if certificate is None else certificate.fingerprint
        context = mp.get_context("spawn")
        parent, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, threads, certificate), daemon=True)
        self.process.start()
        if not parent.poll(60):
            raise RuntimeError("frame server did not start")
        self.address = f"127.0.0.1:{parent.recv()}"

    def pool(self) -> Any:
        """A client pool that dials this server as a peer would (pinned wss when it has a certificate)."""
        from peer.transport import FramePool, UploadPacer
        from swarmhub.wire import PeerEndpoint

        pool = FramePool(max_bytes=MAX_FRAME_BYTES, pacer=UploadPacer(None))
        pool.learn([PeerEndpoint(peer_id=1, address=self.address, stage=0, fingerprint=self.fingerprint)])
        return pool

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(10)


# ---- (a) one hop vs one stage's compute ------------------------------------------------------


def stage_compute(preset: str, microbatch: int, seq_len: int, reps: int) -> dict[str, Any]:
    import torch

    from peer.model import build_stage
    from peer.stage_worker import StageWorker
    from swarmhub.presets import get_preset
    from swarmhub.wire import RunSpec

    shape = get_preset(preset)
    spec = RunSpec(
        run_id=1,
        name="bench",
        model_preset=preset,
        dataset="python-stdlib",
        num_stages=2,
        target_batch_size=microbatch * 4,
        microbatch_size=microbatch,
        seq_len=seq_len,
        optimizer="adamw",
        learning_rate=1e-3,
        warmup_steps=0,
        weight_decay=0.0,
        compression="none",
    )
    device = torch.device("cpu")
    first = StageWorker(build_stage(shape, 0, 2, seed=0), spec, 0, device)
    last = StageWorker(build_stage(shape, 1, 2, seed=0), spec, 0, device)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, shape.vocab_size, (microbatch, seq_len), generator=g)
    targets = torch.randint(0, shape.vocab_size, (microbatch, seq_len), generator=g)
    first_times, last_times = [], []
    activations = first.forward(0, ids)
    for rep in range(reps + 1):
        t0 = time.perf_counter()
        activations = first.forward(0, ids)
        t1 = time.perf_counter()
        _, grad_in = last.forward_backward(0, f"mb{rep}", microbatch, activations, targets)
        t2 = time.perf_counter()
        first.backward(0, f"mb{rep}", microbatch, ids, grad_in)
        t3 = time.perf_counter()
        if rep == 0:
            continue  # warm-up
        # stage 0 = its forward call + its backward call (which recomputes the forward);
        # stage 1 (last) = one forward_backward call
        first_times.append((t1 - t0) + (t3 - t2))
        last_times.append(t2 - t1)
    return {
        "activation": activations,
        "stage0_s": statistics.median(first_times),
        "stage1_s": statistics.median(last_times),
        "parameters": [first.parameter_count, last.parameter_count],
    }


def codec_times(activation: Any, codec: str, reps: int) -> dict[str, float]:
    """In-process encode and decode of one activation frame (each side of a hop does one of each)."""
    from peer.frames import decode_frame

    encode, decode = [], []
    frame = b""
    for _ in range(reps):
        started = time.perf_counter()
        frame = _frame(activation, codec)
        middle = time.perf_counter()
        decode_frame(frame, max_bytes=MAX_FRAME_BYTES)
        encode.append(middle - started)
        decode.append(time.perf_counter() - middle)
    return {"encode_s": statistics.median(encode), "decode_s": statistics.median(decode), "bytes": len(frame)}


def _frame(activation: Any, codec: str) -> bytes:
    from peer.frame_headers import ForwardCall
    from peer.frames import encode_frame

    header = ForwardCall(
        run_id=1,
        sender=1,
        stage=1,
        step=0,
        microbatch_id="t0:1",
        samples=activation.shape[0],
        timeout_s=60.0,
    )
    return encode_frame(header, {"x": activation}, codec)


async def hop_round_trips(server: RemoteServer, activation: Any, codec: str, reps: int) -> list[float]:
    """End-to-end stage-call communication: encode, send, remote decode+encode, receive, decode."""
    from peer.frames import decode_frame

    pool = server.pool()
    times = []
    try:
        for rep in range(reps + 3):
            started = time.perf_counter()
            reply = await pool.request(server.address, _frame(activation, codec), timeout=60)
            header, tensors = decode_frame(reply, max_bytes=MAX_FRAME_BYTES)
            elapsed = time.perf_counter() - started
            assert tensors["grad"].shape == activation.shape, header
            if rep >= 3:  # the first calls open the connection and warm up
                times.append(elapsed)
    finally:
        await pool.close()
    return times


# ---- (b) raw throughput --------------------------------------------------------------------


async def raw_throughput(server: RemoteServer, megabytes: int, reps: int) -> list[float]:
    pool = server.pool()
    payload = os.urandom(megabytes * 1024 * 1024)
    times = []
    try:
        for rep in range(reps + 1):
            started = time.perf_counter()
            reply = await pool.request(server.address, payload, timeout=120)
            elapsed = time.perf_counter() - started
            assert reply == ACK
            if rep >= 1:
                times.append(elapsed)
    finally:
        await pool.close()
    return times


# ---- the benchmark ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the demo's peers use 1)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    hop_cases = SMOKE_HOP_CASES if args.smoke else HOP_CASES
    sizes_mb = SMOKE_THROUGHPUT_MB if args.smoke else THROUGHPUT_MB
    hop_reps = 10 if args.smoke else 50
    server = RemoteServer(args.threads)
    rows: list[dict[str, Any]] = []
    try:
        for preset, microbatch, seq_len in hop_cases:
            compute_reps = 2 if args.smoke else (10 if preset == "tiny" else 5)
            print(f"compute: {preset} mb={microbatch} seq={seq_len}...", flush=True)
            compute = stage_compute(preset, microbatch, seq_len, compute_reps)
            activation = compute["activation"]
            for codec in ("none", "int8"):
                codecs = codec_times(activation, codec, hop_reps)
                trips = asyncio.run(hop_round_trips(server, activation, codec, hop_reps))
                call = statistics.median(trips)
                rows.append(
                    {
                        "part": "hop",
                        "preset": preset,
                        "microbatch": microbatch,
                        "seq_len": seq_len,
                        "codec": codec,
                        "frame_bytes": codecs["bytes"],
                        "encode_ms": codecs["encode_s"] * 1e3,
                        "decode_ms": codecs["decode_s"] * 1e3,
                        "call_comm_p50_ms": call * 1e3,
                        "call_comm_p90_ms": percentile(trips, 90) * 1e3,
                        "hop_ms": call / 2 * 1e3,
                        "stage0_compute_ms": compute["stage0_s"] * 1e3,
                        "stage1_compute_ms": compute["stage1_s"] * 1e3,
                        "hop_over_stage0": call / 2 / compute["stage0_s"],
                        "call_comm_over_stage0": call / compute["stage0_s"],
                        "stage_parameters": compute["parameters"],
                    }
                )
        for megabytes in sizes_mb:
            reps = 3 if args.smoke else max(5, 80 // megabytes)
            print(f"throughput: {megabytes} MB x {reps}...", flush=True)
            times = asyncio.run(raw_throughput(server, megabytes, reps))
            rows.append(
                {
                    "part": "throughput",
                    "frame_mb": megabytes,
                    "reps": reps,
                    "p50_ms": statistics.median(times) * 1e3,
                    "mb_per_s": megabytes / statistics.median(times),
                    "mb_per_s_best": megabytes / min(times),
                    "mb_per_s_worst": megabytes / max(times),
                }
            )
    finally:
        server.stop()

    hops = [r for r in rows if r["part"] == "hop"]
    print_table(
        hops,
        [
            "preset",
            "seq_len",
            "codec",
            "frame_bytes",
            "encode_ms",
            "decode_ms",
            "call_comm_p50_ms",
            "call_comm_p90_ms",
            "hop_ms",
            "stage0_compute_ms",
            "stage1_compute_ms",
            "hop_over_stage0",
        ],
    )
    print()
    print_table(
        [r for r in rows if r["part"] == "throughput"],
        ["frame_mb", "reps", "p50_ms", "mb_per_s", "mb_per_s_best", "mb_per_s_worst"],
    )

    def plot(ax: Any) -> None:
        labels = [f"{r['preset']}\nseq {r['seq_len']}\n{r['codec']}" for r in hops]
        ax.bar(
            range(len(hops)),
            [r["hop_over_stage0"] for r in hops],
            color=["C0" if r["codec"] == "none" else "C1" for r in hops],
        )
        ax.set_xticks(range(len(hops)), labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("one hop / stage-0 compute (fwd + bwd)")
        mbps = ", ".join(
            f"{r['frame_mb']} MB: {r['mb_per_s']:.0f} MB/s" for r in rows if r["part"] == "throughput"
        )
        ax.set_title(f"Data-plane hop vs stage compute (loopback; raw {mbps})", fontsize=9)
        ax.axhline(1.0, color="grey", linewidth=0.8)

    config = {
        "smoke": args.smoke,
        "threads": args.threads,
        "hop_cases": hop_cases,
        "throughput_mb": sizes_mb,
        "hop_reps": hop_reps,
        "num_stages": 2,
        "cpus": len(os.sched_getaffinity(0)),
        "hop_definition": "half of a stage call round trip: activation out, same-size tensor back",
    }
    name = "transport_smoke" if args.smoke else "transport"
    path = write_results(name, config=config, rows=rows, plot=plot, out_dir=args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
