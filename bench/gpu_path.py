"""GPU path: a peer's codec and stage compute on CUDA against the same machine's CPU, in one run.

Three parts, each measured on `cuda` and on `cpu` side by side (the cuda half is skipped, and says
so, where torch sees no GPU):

1. codec: the run's codecs (peer/compression.py: 'none', 'float16', 'int8') encoding an activation
   that lives on the device and decoding it back onto the device, as a stage peer does with its
   calls' tensors: median ms and MB/s (float32 bytes per second) of encode and decode, and the
   round trip's relative L2 error. Beside them, bitsandbytes' blockwise 8-bit kernels themselves
   (`quantize_blockwise` / `dequantize_blockwise`, the int8 codec's core) run on each device, and
   on cuda whether the codes and absmax the GPU kernel writes are the ones the CPU kernel writes
   (the lossy codecs encode on the tensor's device, and rows 'via the host' time the way they did
   before, copying it to the host first).
   Activations are stage 0's real output for each preset case below, plus one large shape.
2. stage step: one stage call through the peer's own StageWorker (inputs and output gradients
   arrive on the CPU, as from the wire, and results go back to the CPU): a first stage's forward
   call and its backward call (recomputed forward + backward), and the last stage's forward_backward,
   for the presets the benchmarks use (tiny at seq 64 in 2 stages, small at seq 256 in 2 stages,
   swarm-ref at seq 64 in 4 stages), at two microbatch sizes. Median ms per call and samples/s; on
   cuda also the peak allocated memory after a call and an optimizer step, next to the estimate
   peer/fits.py refuses runs by (swarmhub.resources.estimate_stage_memory). And the start-up
   benchmark (peer/benchmark.py, one block's samples/s) on both devices.
3. swarm: a real local swarm (coordinator + 2 peers, `swarmhub-peer join --device cuda`, then the
   same with `--device cpu`), tiny preset, int8 compression, a few steps: the losses, step times
   and what the coordinator recorded of each peer's device.

CPU figures use torch's default thread count in this process (all cores) for parts 1-2; the swarm's
CPU peers run one thread each, as every local swarm here does (SWARMHUB_PEER_THREADS=1).

    PYTHONPATH=. python -m bench.gpu_path [--smoke] [--parts codec stage swarm] [--swarm-steps 8] [--out DIR]

On a GPU machine whose python has torch but not this project's dependencies: download the lock's
versions of pydantic, pydantic-core, pydantic-settings, python-dotenv, annotated-types,
typing-inspection, typing-extensions, fastapi, starlette, annotated-doc, opentelemetry-api, uvicorn,
h11, click, anyio, idna, sqlalchemy, greenlet, alembic, mako, markupsafe, argon2-cffi,
argon2-cffi-bindings, cffi, pycparser, cryptography, websockets, httpx, httpcore, certifi,
safetensors, prometheus-client, packaging and pyarrow (`server.app` imports it; its wheel is 55 MB,
so strip it of flight, s3, headers and tests and carry it as a tar.xz) as wheels for its python
(`pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux...`), unpack
bitsandbytes' wheel keeping only the libbitsandbytes_cpu/_cuda1xx libraries its CUDA needs, then
`pip install --no-index --no-deps --target /tmp/site WHEELS` (and unpack pyarrow there) and run
with `PYTHONPATH=$PWD:/tmp/site:BITSANDBYTES_DIR`. Without
`swarmhub` console scripts beside the interpreter, part 3 writes wrappers for them on PATH.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from bench.baselines import TrainConfig
from bench.report import RESULTS_DIR, print_table, write_results
from peer.benchmark import measure_block_throughput
from peer.compression import INT8_BLOCKSIZE, get_codec
from peer.fits import free_memory
from peer.model import build_stage
from peer.stage_worker import StageWorker
from swarmhub.presets import get_preset
from swarmhub.resources import estimate_stage_memory

ROOT = Path(__file__).resolve().parent.parent
MB = 1e6
PARTS = ("codec", "stage", "swarm")


@dataclass(frozen=True)
class StageCase:
    preset: str
    num_stages: int
    seq_len: int


STAGE_CASES = (StageCase("tiny", 2, 64), StageCase("small", 2, 256), StageCase("swarm-ref", 4, 64))
SMOKE_CASES = (StageCase("tiny", 2, 16),)
LARGE_ACTIVATION = (8, 1024, 1024)
"""One large activation for the codec (a `large`-preset microbatch of 8 at seq 1024, 33.5 MB)."""


def devices() -> list[str]:
    return ["cuda", "cpu"] if torch.cuda.is_available() else ["cpu"]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(
    fn: Callable[[], Any], device: str, *, min_s: float, min_reps: int, max_reps: int
) -> tuple[float, Any]:
    """Median seconds of `fn()` over repeats (one warm-up call first, synchronized on cuda) and its
    last result: at least `min_reps` timed calls, more until `min_s` has passed or `max_reps`."""
    result = fn()
    sync(device)
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - started < min_s):
        t0 = time.perf_counter()
        result = fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def rel_error(decoded: torch.Tensor, original: torch.Tensor) -> float:
    original = original.float().cpu()
    return float((decoded.float().cpu() - original).norm() / original.norm())


# ---- 1. codec --------------------------------------------------------------------------------


def stage0_activation(case: StageCase, microbatch: int, device: str) -> torch.Tensor:
    """Stage 0's output on random tokens (seeded), computed on `device`, returned on the CPU."""
    preset = get_preset(case.preset)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, preset.vocab_size, (microbatch, case.seq_len), generator=g)
    stage = build_stage(preset, 0, case.num_stages, seed=0).to(device)
    with torch.no_grad():
        return stage(tokens.to(device)).float().cpu()


def codec_rows(name: str, activation: torch.Tensor, reps: dict[str, Any]) -> list[dict[str, Any]]:
    import bitsandbytes.functional as bnbf  # the int8 codec's kernels, called directly below

    rows: list[dict[str, Any]] = []
    raw = activation.numel() * 4
    shape = list(activation.shape)
    code_cpu = bnbf.create_dynamic_map().float()
    kernel_codes: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for device in devices():
        x = activation.to(device)
        ways: list[tuple[str, str, Callable[[Any, torch.Tensor], bytes]]] = [
            (codec_name, f"codec {codec_name}", lambda c, x: c.encode(x))
            for codec_name in ("none", "float16", "int8")
        ]
        if device == "cuda":
            # How the lossy codecs ran before they encoded on the device: copied to the host first.
            ways += [
                (codec_name, f"codec {codec_name} via the host", lambda c, x: c.encode(x.cpu()))
                for codec_name in ("float16", "int8")
            ]
        for codec_name, what, encode in ways:
            codec = get_codec(codec_name)
            enc_s, data = timed(lambda c=codec, x=x, e=encode: e(c, x), device, **reps)
            dec_s, decoded = timed(
                lambda c=codec, d=data, dev=device: c.decode(d, shape, torch.float32).to(dev), device, **reps
            )
            rows.append(
                {
                    "activation": name,
                    "shape": shape,
                    "device": device,
                    "what": what,
                    "bytes_per_element": len(data) / activation.numel(),
                    "encode_ms": enc_s * 1e3,
                    "decode_ms": dec_s * 1e3,
                    "encode_MBps": raw / enc_s / MB,
                    "decode_MBps": raw / dec_s / MB,
                    "round_trip_MBps": raw / (enc_s + dec_s) / MB,
                    "rel_l2_error": rel_error(decoded, activation),
                }
            )
        # The int8 codec's core, on this device: bitsandbytes' blockwise kernels alone.
        flat = x.reshape(-1)
        code = code_cpu.to(device)
        q_s, (codes, state) = timed(
            lambda f=flat, c=code: bnbf.quantize_blockwise(f, code=c, blocksize=INT8_BLOCKSIZE),
            device,
            **reps,
        )
        dq_s, decoded = timed(
            lambda q=codes, a=state.absmax, c=code: bnbf.dequantize_blockwise(
                q, absmax=a, code=c, blocksize=INT8_BLOCKSIZE
            ),
            device,
            **reps,
        )
        kernel_codes[device] = (codes.cpu(), state.absmax.float().cpu())
        rows.append(
            {
                "activation": name,
                "shape": shape,
                "device": device,
                "what": "bnb blockwise kernels",
                "bytes_per_element": 1 + 4 / INT8_BLOCKSIZE,
                "encode_ms": q_s * 1e3,
                "decode_ms": dq_s * 1e3,
                "encode_MBps": raw / q_s / MB,
                "decode_MBps": raw / dq_s / MB,
                "round_trip_MBps": raw / (q_s + dq_s) / MB,
                "rel_l2_error": rel_error(decoded.reshape(activation.shape), activation),
            }
        )
    if "cuda" in kernel_codes:
        (gpu_codes, gpu_absmax), (cpu_codes, cpu_absmax) = kernel_codes["cuda"], kernel_codes["cpu"]
        differ = gpu_codes != cpu_codes
        step = (gpu_codes.to(torch.int16) - cpu_codes.to(torch.int16)).abs()
        rows.append(
            {
                "activation": name,
                "shape": shape,
                "device": "cuda vs cpu",
                "what": "bnb kernel agreement",
                "codes_differing_fraction": float(differ.float().mean()),
                "codes_max_step": int(step.max()),
                "absmax_max_rel_diff": float(
                    ((gpu_absmax - cpu_absmax).abs() / cpu_absmax.clamp_min(1e-30)).max()
                ),
            }
        )
    return rows


# ---- 2. stage step ---------------------------------------------------------------------------


def stage_rows(case: StageCase, microbatch: int, reps: dict[str, Any]) -> list[dict[str, Any]]:
    preset = get_preset(case.preset)
    cfg = replace(
        TrainConfig(),
        preset=case.preset,
        num_stages=case.num_stages,
        seq_len=case.seq_len,
        microbatch_size=microbatch,
        batch_size=4 * microbatch,
    )
    run = cfg.run_spec()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, preset.vocab_size, (microbatch, case.seq_len), generator=g)
    activation = torch.randn(microbatch, case.seq_len, preset.d_model, generator=g)
    grad_out = torch.randn(microbatch, case.seq_len, preset.d_model, generator=g) * 1e-3
    rows: list[dict[str, Any]] = []
    for stage in (0, case.num_stages - 1):
        for device in devices():
            if device == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            worker = StageWorker(
                build_stage(preset, stage, case.num_stages, seed=0), run, 0, torch.device(device)
            )
            counter = iter(range(10**9))
            calls: dict[str, Callable[[], Any]] = {}
            if stage < case.num_stages - 1:
                calls["forward"] = lambda w=worker: w.forward(0, tokens)
                calls["backward"] = lambda w=worker, c=counter: w.backward(
                    0, f"0:{next(c)}", microbatch, tokens, grad_out
                )
            else:
                calls["forward_backward"] = lambda w=worker, c=counter: w.forward_backward(
                    0, f"0:{next(c)}", microbatch, activation, tokens
                )
            for call, fn in calls.items():
                seconds, _ = timed(fn, device, **reps)
                rows.append(
                    {
                        "preset": case.preset,
                        "stage": f"{stage}/{case.num_stages}",
                        "seq_len": case.seq_len,
                        "microbatch": microbatch,
                        "call": call,
                        "device": device,
                        "ms": seconds * 1e3,
                        "samples_per_s": microbatch / seconds,
                    }
                )
            if device == "cuda":
                # An optimizer step too, so the peak holds the optimizer state the estimate counts.
                worker.apply_step(worker.flat_gradients(), microbatch, run.learning_rate, 1.0)
                sync(device)
                estimate = estimate_stage_memory(
                    preset,
                    stage=stage,
                    num_stages=case.num_stages,
                    microbatch_size=microbatch,
                    seq_len=case.seq_len,
                    optimizer=run.optimizer,
                )
                for row in rows[-len(calls) :]:
                    row["cuda_peak_bytes"] = torch.cuda.max_memory_allocated()
                    row["cuda_peak_over_base_bytes"] = torch.cuda.max_memory_allocated() - base
                    row["stage_param_bytes"] = 4 * worker.parameter_count
                    row["estimate_bytes"] = estimate.total
            del worker
    return rows


def pair_speedups(
    rows: list[dict[str, Any]], key: tuple[str, ...], metric: str, out: str = "cpu_over_cuda"
) -> None:
    """Add `out` (cpu's `metric` / cuda's) to each cuda row, matched on `key`."""
    cpu = {tuple(str(r.get(k)) for k in key): r for r in rows if r.get("device") == "cpu"}
    for row in rows:
        if row.get("device") == "cuda":
            other = cpu.get(tuple(str(row.get(k)) for k in key))
            if other and other.get(metric) and row.get(metric):
                row[out] = other[metric] / row[metric]


def startup_rows(cases: tuple[StageCase, ...], microbatches: tuple[int, ...]) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        for microbatch in microbatches:
            cfg = replace(
                TrainConfig(),
                preset=case.preset,
                num_stages=case.num_stages,
                seq_len=case.seq_len,
                microbatch_size=microbatch,
                batch_size=4 * microbatch,
            )
            for device in devices():
                rate = measure_block_throughput(get_preset(case.preset), cfg.run_spec(), torch.device(device))
                rows.append(
                    {
                        "preset": case.preset,
                        "seq_len": case.seq_len,
                        "microbatch": microbatch,
                        "device": device,
                        "block_samples_per_s": rate,
                    }
                )
    return rows


# ---- 3. swarm --------------------------------------------------------------------------------


def ensure_commands() -> None:
    """LocalSwarm runs `swarmhub` and `swarmhub-peer`; where this interpreter has no such console
    scripts (a bare machine, the project on PYTHONPATH), put wrappers for them first on PATH. Child
    processes find the project through an absolute PYTHONPATH."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *[p for p in paths if Path(p) != ROOT]])
    here = Path(sys.executable)
    if here.with_name("swarmhub").exists() and here.with_name("swarmhub-peer").exists():
        return
    bin_dir = Path(tempfile.mkdtemp(prefix="swarmhub-bin-"))
    for name, module in (("swarmhub", "launch.cli"), ("swarmhub-peer", "peer.cli")):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n')
        script.chmod(0o755)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def swarm_run(device: str, cfg: TrainConfig, steps: int, peers: int, timeout_s: float) -> dict[str, Any]:
    from launch.local_swarm import LocalSwarm

    started = time.monotonic()
    with LocalSwarm() as swarm:
        try:
            run = swarm.create_run(
                name=f"gpu path: {device}", **{**cfg.run_params(), "max_steps": steps}, compression="int8"
            )
            for _ in range(peers):
                swarm.start_peer("--device", device)
            rows = swarm.wait_for_steps(run["id"], steps, timeout_s=timeout_s)
            peer_rows = swarm.peer_rows(run["id"])
        except Exception as exc:
            return {"device": device, "error": f"{type(exc).__name__}: {exc}", "logs": swarm.logs()[-6000:]}
    durations = [r["duration_s"] for r in rows]
    timed_steps = rows[1:] or rows
    samples = sum(r["samples_sent"] - r["samples_lost"] for r in timed_steps)
    seconds = sum(r["duration_s"] for r in timed_steps)
    return {
        "device": device,
        "steps": len(rows),
        "losses": [r["loss"] for r in rows],
        "step_duration_s": durations,
        "samples_per_s_after_first_step": samples / seconds if seconds else None,
        "peers": [
            {k: p.get(k) for k in ("name", "device", "device_name", "stage", "throughput", "samples_done")}
            for p in peer_rows
        ],
        "wall_s": time.monotonic() - started,
    }


# ---- main ------------------------------------------------------------------------------------


def section(title: str) -> None:
    print(f"\n== {title} ==", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_path", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, few repeats, a 2-step swarm")
    parser.add_argument("--microbatches", type=int, nargs="+", default=[4, 32])
    parser.add_argument(
        "--parts", nargs="+", choices=PARTS, default=list(PARTS), help="which parts to run (default: all)"
    )
    parser.add_argument(
        "--name", default="gpu_path", help="the results file's name before _<hardware>_<date>"
    )
    parser.add_argument("--swarm-steps", type=int, default=8)
    parser.add_argument("--swarm-timeout", type=float, default=90.0, help="seconds for each swarm's steps")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    cases = SMOKE_CASES if args.smoke else STAGE_CASES
    microbatches = (2,) if args.smoke else tuple(args.microbatches)
    reps = (
        {"min_s": 0.0, "min_reps": 1, "max_reps": 2}
        if args.smoke
        else {"min_s": 0.2, "min_reps": 3, "max_reps": 50}
    )
    step_reps = {**reps, "min_reps": 2} if not args.smoke else reps
    swarm_steps = 2 if args.smoke else args.swarm_steps
    best = devices()[0]
    cuda_free = free_memory("cuda") if torch.cuda.is_available() else None
    print(
        f"torch {torch.__version__} (cuda {torch.version.cuda}); devices {devices()};"
        f" {torch.get_num_threads()} CPU threads;"
        f" {torch.cuda.get_device_name() if best == 'cuda' else 'no GPU: cuda parts skipped'};"
        f" peer.fits.free_memory('cuda') = {cuda_free}",
        flush=True,
    )
    errors: dict[str, str] = {}
    started = time.monotonic()
    codec: list[dict[str, Any]] = []
    stage: list[dict[str, Any]] = []
    startup: list[dict[str, Any]] = []
    swarm: list[dict[str, Any]] = []
    swarm_cfg = TrainConfig(preset="tiny", num_stages=2, batch_size=32, microbatch_size=8, seq_len=64)

    def save() -> Path:
        """Write what is measured so far (again after each part: a run cut short keeps it)."""
        return write_results(
            args.name,
            config={
                "smoke": args.smoke,
                "parts": args.parts,
                "stage_cases": [asdict(c) for c in cases],
                "microbatches": list(microbatches),
                "repeats": reps,
                "stage_repeats": step_reps,
                "swarm": {**asdict(swarm_cfg), "steps": swarm_steps, "peers": 2, "compression": "int8"},
                "devices": devices(),
                "cuda_device": torch.cuda.get_device_name() if best == "cuda" else None,
                "cuda_version": torch.version.cuda,
                "cpu_threads": torch.get_num_threads(),
                "cpu_count": os.cpu_count(),
                "cuda_free_memory": cuda_free,
                "wall_s": time.monotonic() - started,
            },
            rows=[
                *({"part": "codec", **r} for r in codec),
                *({"part": "stage", **r} for r in stage),
                *({"part": "startup", **r} for r in startup),
                *({"part": "swarm", **r} for r in swarm),
                *([{"part": "errors", **errors}] if errors else []),
            ],
            out_dir=args.out,
        )

    def run_part(name: str, title: str, measure: Callable[[], None]) -> None:
        """One part: skipped unless asked for; a failure is recorded and the other parts still run."""
        section(title)
        if name not in args.parts:
            print("skipped (--parts)")
            return
        try:
            measure()
        except Exception:
            errors[name] = traceback.format_exc()
            print(errors[name], flush=True)
        save()

    def measure_codec() -> None:
        activations = [
            (f"{c.preset} mb{m}", stage0_activation(c, m, best)) for c in cases for m in microbatches
        ]
        if not args.smoke:
            g = torch.Generator().manual_seed(2)
            activations.append(("large-shape randn", torch.randn(*LARGE_ACTIVATION, generator=g)))
        for name, activation in activations:
            codec.extend(codec_rows(name, activation, reps))
        pair_speedups(codec, ("activation", "what"), "encode_ms", out="cpu_over_cuda_encode")
        pair_speedups(codec, ("activation", "what"), "decode_ms", out="cpu_over_cuda_decode")
        print_table(
            [r for r in codec if r["what"] != "bnb kernel agreement"],
            [
                "activation",
                "device",
                "what",
                "encode_ms",
                "decode_ms",
                "encode_MBps",
                "decode_MBps",
                "rel_l2_error",
                "cpu_over_cuda_encode",
                "cpu_over_cuda_decode",
            ],
        )
        agreement = [r for r in codec if r["what"] == "bnb kernel agreement"]
        if agreement:
            print_table(
                agreement,
                ["activation", "codes_differing_fraction", "codes_max_step", "absmax_max_rel_diff"],
            )

    def measure_stage() -> None:
        for case in cases:
            for microbatch in microbatches:
                stage.extend(stage_rows(case, microbatch, step_reps))
                print(
                    f"  {case.preset} mb{microbatch} done ({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
        pair_speedups(stage, ("preset", "stage", "microbatch", "call"), "ms")
        print_table(
            stage,
            [
                "preset",
                "stage",
                "seq_len",
                "microbatch",
                "call",
                "device",
                "ms",
                "samples_per_s",
                "cpu_over_cuda",
                "cuda_peak_bytes",
                "cuda_peak_over_base_bytes",
                "stage_param_bytes",
                "estimate_bytes",
            ],
        )
        startup.extend(startup_rows(cases, microbatches))
        cpu_rate = {
            (r["preset"], r["microbatch"]): r["block_samples_per_s"] for r in startup if r["device"] == "cpu"
        }
        for row in startup:
            if row["device"] == "cuda":
                row["cuda_over_cpu"] = (
                    row["block_samples_per_s"] / cpu_rate[(row["preset"], row["microbatch"])]
                )
        print("start-up benchmark (peer/benchmark.py, one block):")
        print_table(
            startup, ["preset", "seq_len", "microbatch", "device", "block_samples_per_s", "cuda_over_cpu"]
        )

    def measure_swarm() -> None:
        ensure_commands()
        for device in devices():
            result = swarm_run(device, swarm_cfg, swarm_steps, peers=2, timeout_s=args.swarm_timeout)
            swarm.append(result)
            if "error" in result:
                errors[f"swarm {device}"] = result["error"]
                print(f"{device}: FAILED {result['error']}\n{result['logs']}", flush=True)
            else:
                print(
                    f"{device}: {result['steps']} steps, losses {[round(x, 3) for x in result['losses']]},"
                    f" step s {[round(x, 2) for x in result['step_duration_s']]},"
                    f" {result['samples_per_s_after_first_step']:.1f} samples/s after step 1;"
                    f" peers {[(p['device'], p['device_name'], p['stage']) for p in result['peers']]}",
                    flush=True,
                )
            save()

    run_part("codec", "1. codec: encode on the device, decode back onto it", measure_codec)
    run_part("stage", "2. stage step: StageWorker calls, inputs from and results to the CPU", measure_stage)
    run_part("swarm", "3. swarm: coordinator + 2 peers, tiny, int8", measure_swarm)

    path = save()
    print(f"\nresults: {path} ({time.monotonic() - started:.0f} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
