"""Baselines for the SWARM benchmarks: the same model, data and optimizer rule in one process, and as a
synchronous pipeline with PyTorch's own `torch.distributed.pipelining` (gloo over loopback, one
process per stage, one thread each), scheduled GPipe-style (`ScheduleGPipe`: every forward, then
every backward) or 1F1B (`Schedule1F1B`: one forward, one backward, interleaved once full).

Both take a global step exactly as a SwarmHub run does: the batch is cut into microbatches of the
run's size, each stage's gradient is the batch-mean gradient, every gradient is scaled by
`swarmhub.schedule.clip_scale` of the whole model's norm, and the step is
`peer.stage_worker.apply_gradients` with `make_optimizer` at `swarmhub.schedule.learning_rate`.

    .venv/bin/python -m bench.baselines [--preset tiny] [--steps 20] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import socket
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.report import RESULTS_DIR, print_table, write_results
from peer.data import SampleSource
from peer.model import build_full_model, build_stage, full_forward_loss
from peer.stage_worker import apply_gradients, make_optimizer
from server.datasets.store import stdlib_corpus
from swarmhub.datasets import BUNDLED_DATASET
from swarmhub.presets import get_preset
from swarmhub.schedule import clip_scale, learning_rate
from swarmhub.wire import RunSpec

LOSS_TOLERANCE = 1e-4
"""Relative difference allowed between GPipe's and one process's first-step loss (float32 reorderings)."""


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """What a SwarmHub run, the single process and GPipe share (RunCreate's defaults)."""

    preset: str = "tiny"
    num_stages: int = 2
    batch_size: int = 32
    microbatch_size: int = 8
    seq_len: int = 64
    learning_rate: float = 3e-3
    warmup_steps: int = 10
    weight_decay: float = 0.01
    max_steps: int = 30
    seed: int = 0

    @property
    def microbatches(self) -> int:
        return self.batch_size // self.microbatch_size

    def run_spec(self) -> RunSpec:
        return RunSpec(
            run_id=0,
            name="baseline",
            model_preset=self.preset,
            dataset=BUNDLED_DATASET,
            num_stages=self.num_stages,
            target_batch_size=self.batch_size,
            microbatch_size=self.microbatch_size,
            seq_len=self.seq_len,
            optimizer="adamw",
            learning_rate=self.learning_rate,
            warmup_steps=self.warmup_steps,
            weight_decay=self.weight_decay,
            compression="none",
            max_steps=self.max_steps,
            seed=self.seed,
        )

    def run_params(self) -> dict[str, Any]:
        """The same configuration as the body of POST /api/runs."""
        return {
            "model_preset": self.preset,
            "num_stages": self.num_stages,
            "target_batch_size": self.batch_size,
            "microbatch_size": self.microbatch_size,
            "seq_len": self.seq_len,
            "learning_rate": self.learning_rate,
            "warmup_steps": self.warmup_steps,
            "weight_decay": self.weight_decay,
            "max_steps": self.max_steps,
            "seed": self.seed,
        }


def _rate(cfg: TrainConfig, step: int) -> float:
    return learning_rate(step, peak=cfg.learning_rate, warmup_steps=cfg.warmup_steps, max_steps=cfg.max_steps)


def single_process(cfg: TrainConfig, steps: int, warmup: int, threads: int) -> dict[str, Any]:
    """Train `steps` global steps in this process; samples/s over the steps after `warmup`."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        source = SampleSource(
            stdlib_corpus(), cfg.seq_len, cfg.seed, token_bytes=get_preset(cfg.preset).token_bytes
        )
        stages = build_full_model(get_preset(cfg.preset), cfg.num_stages, cfg.seed)
        spec = cfg.run_spec()
        optimizers = [make_optimizer(spec, list(s.parameters())) for s in stages]
        losses: list[float] = []
        timed_s = 0.0
        for step in range(steps):
            started = time.perf_counter()
            mb_losses = []
            for m in range(cfg.microbatches):
                first = step * cfg.batch_size + m * cfg.microbatch_size
                inputs, targets = source.batch(first, cfg.microbatch_size)
                loss = full_forward_loss(stages, inputs, targets)
                (loss * (cfg.microbatch_size / cfg.batch_size)).backward()
                mb_losses.append(float(loss.detach()))
            _clip_and_step(stages, optimizers, _rate(cfg, step))
            losses.append(sum(mb_losses) / len(mb_losses))
            if step >= warmup:
                timed_s += time.perf_counter() - started
    finally:
        torch.set_num_threads(previous_threads)
    timed = steps - warmup
    return {
        "samples_per_s": timed * cfg.batch_size / timed_s if timed_s else 0.0,
        "losses": losses,
        "threads": threads,
        "timed_steps": timed,
    }


def _clip_and_step(stages: list[torch.nn.Module], optimizers: list[torch.optim.Optimizer], lr: float) -> None:
    norms_sq = [sum(float(p.grad.pow(2).sum()) for p in s.parameters()) for s in stages]
    _step_stage_list(stages, optimizers, clip_scale(norms_sq), lr)


def _step_stage_list(
    stages: list[torch.nn.Module], optimizers: list[torch.optim.Optimizer], scale: float, lr: float
) -> None:
    for stage, optimizer in zip(stages, optimizers, strict=True):
        grads = [p.grad * scale for p in stage.parameters()]
        apply_gradients(stage, optimizer, grads, lr)


# ---- GPipe and 1F1B with torch.distributed.pipelining ------------------------------------------

SCHEDULES = ("gpipe", "1f1b")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pipeline_worker(
    rank: int,
    cfg: TrainConfig,
    steps: int,
    warmup: int,
    port: int,
    result_path: str,
    schedule_name: str,
    checkpoint_dir: str | None,
    resume: bool,
) -> None:
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.set_num_threads(1)
    world = cfg.num_stages
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        preset = get_preset(cfg.preset)
        module = build_stage(preset, rank, world, cfg.seed)
        mb = cfg.microbatch_size
        example = (
            torch.zeros(mb, cfg.seq_len, dtype=torch.long)
            if rank == 0
            else torch.zeros(mb, cfg.seq_len, preset.d_model)
        )
        stage = PipelineStage(module, rank, world, torch.device("cpu"), input_args=(example,))

        def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))

        kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule_name]
        schedule = kind(stage, n_microbatches=cfg.microbatches, loss_fn=loss_fn)
        optimizer = make_optimizer(cfg.run_spec(), list(module.parameters()))
        checkpoint = Path(checkpoint_dir) / f"stage-{rank}.pt" if checkpoint_dir else None
        first_step = 0
        if checkpoint is not None and resume:
            saved = torch.load(checkpoint)
            module.load_state_dict(saved["module"])
            optimizer.load_state_dict(saved["optimizer"])
            first_step = saved["step"]
        dist.barrier()
        resumed_at = time.time()
        source = SampleSource(
            stdlib_corpus(), cfg.seq_len, cfg.seed, token_bytes=get_preset(cfg.preset).token_bytes
        )
        losses: list[float] = []
        step_ends: list[float] = []
        timed_s = 0.0
        for done, step in enumerate(range(first_step, first_step + steps)):
            dist.barrier()
            started = time.perf_counter()
            inputs, targets = source.batch(step * cfg.batch_size, cfg.batch_size)
            mb_losses: list[torch.Tensor] = []
            if rank == 0:
                schedule.step(inputs)
            elif rank == world - 1:
                schedule.step(target=targets, losses=mb_losses)
            else:
                schedule.step()
            # scale_grads=True: each stage's .grad is the mean over microbatches = the batch mean.
            norm_sq = torch.tensor([sum(float(p.grad.pow(2).sum()) for p in module.parameters())])
            dist.all_reduce(norm_sq)  # the whole model's squared norm, as the coordinator assembles it
            scale = clip_scale([float(norm_sq)])
            grads = [p.grad * scale for p in module.parameters()]
            apply_gradients(module, optimizer, grads, _rate(cfg, step))
            if done >= warmup:
                timed_s += time.perf_counter() - started
            step_ends.append(time.time())
            if rank == world - 1:
                losses.append(sum(float(x.detach()) for x in mb_losses) / len(mb_losses))
        if checkpoint is not None:
            state = {"module": module.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save({**state, "step": first_step + steps}, checkpoint)
        if rank == world - 1:
            timed = steps - warmup
            Path(result_path).write_text(
                json.dumps(
                    {
                        "samples_per_s": timed * cfg.batch_size / timed_s if timed_s else 0.0,
                        "losses": losses,
                        "timed_steps": timed,
                        "resumed_at": resumed_at,
                        "step_ends": step_ends,
                    }
                )
            )
        dist.barrier()
    finally:
        dist.destroy_process_group()


def torch_pipeline(
    cfg: TrainConfig,
    steps: int,
    warmup: int,
    schedule: str,
    *,
    checkpoint_dir: str | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """A torch.distributed.pipelining baseline (`schedule`: gpipe or 1f1b) in `num_stages` spawned
    processes; samples/s measured on the last stage. With `checkpoint_dir` each stage saves its
    parameters, optimizer state and step count there after its last step and, with `resume`, first
    goes on from what is there."""
    import torch.multiprocessing as mp

    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    with tempfile.TemporaryDirectory(prefix=f"bench-{schedule}-") as tmp:
        result_path = os.path.join(tmp, "result.json")
        mp.spawn(
            _pipeline_worker,
            args=(cfg, steps, warmup, _free_port(), result_path, schedule, checkpoint_dir, resume),
            nprocs=cfg.num_stages,
            join=True,
        )
        result = json.loads(Path(result_path).read_text())
    result["processes"] = cfg.num_stages
    result["schedule"] = schedule
    return result


def gpipe(cfg: TrainConfig, steps: int, warmup: int) -> dict[str, Any]:
    return torch_pipeline(cfg, steps, warmup, "gpipe")


def one_f_one_b(cfg: TrainConfig, steps: int, warmup: int) -> dict[str, Any]:
    return torch_pipeline(cfg, steps, warmup, "1f1b")


def pipeline_restart(cfg: TrainConfig, steps: int = 4) -> dict[str, Any]:
    """What a fixed 1F1B pipeline loses when it restarts from its checkpoint: every stage's process
    started again (a member's death ends the whole group's collectives), the group formed, each stage
    built and its checkpoint loaded, and the first step run, which also sizes the pipeline's buffers.

    `restart_s` is the time from the launch to the end of the first step after it, less one steady
    step: the time the pipeline trained nothing. Detecting the death and finding a replacement machine
    are not counted (they favour the fixed pipeline)."""
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as checkpoint_dir:
        torch_pipeline(cfg, 1, 0, "1f1b", checkpoint_dir=checkpoint_dir)
        launched = time.time()
        resumed = torch_pipeline(cfg, steps, 1, "1f1b", checkpoint_dir=checkpoint_dir, resume=True)
    ends = resumed["step_ends"]
    steady_step_s = statistics.median(b - a for a, b in itertools.pairwise(ends))
    return {
        "restart_s": ends[0] - launched - steady_step_s,
        "launch_to_loaded_s": resumed["resumed_at"] - launched,
        "first_step_s": ends[0] - resumed["resumed_at"],
        "steady_step_s": steady_step_s,
        "processes": resumed["processes"],
    }


def loss_check(single: dict[str, Any], pipe: dict[str, Any]) -> dict[str, Any]:
    a, b = single["losses"][0], pipe["losses"][0]
    diff = abs(a - b) / max(abs(a), 1e-12)
    return {"single_first_loss": a, "gpipe_first_loss": b, "rel_diff": diff, "equal": diff <= LOSS_TOLERANCE}


def print_loss_check(check: dict[str, Any]) -> None:
    verdict = "equal" if check["equal"] else "DIFFERENT"
    print(
        f"first-step loss: one process {check['single_first_loss']:.6f},"
        f" GPipe {check['gpipe_first_loss']:.6f}"
        f" (relative difference {check['rel_diff']:.2e}: {verdict}, tolerance {LOSS_TOLERANCE:g})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baselines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="untimed first steps")
    parser.add_argument(
        "--threads",
        default="1,2",
        help="comma-separated torch thread counts for the single process (one row each; smoke: the first)",
    )
    parser.add_argument("--smoke", action="store_true", help="a few steps, to check the script runs")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    steps, warmup = (3, 1) if args.smoke else (args.steps, args.warmup)
    cfg = TrainConfig(preset=args.preset, num_stages=args.stages, max_steps=steps)

    thread_counts = [int(t) for t in args.threads.split(",")][: 1 if args.smoke else None]
    singles = [single_process(cfg, steps, warmup, t) for t in thread_counts]
    single = singles[0]
    pipe = gpipe(cfg, steps, warmup)
    interleaved = one_f_one_b(cfg, steps, warmup)
    check = loss_check(single, pipe)
    rows = [
        {
            "system": f"one process ({s['threads']} thread{'s' if s['threads'] > 1 else ''})",
            "samples_per_s": s["samples_per_s"],
            "ratio_to_one_process": s["samples_per_s"] / single["samples_per_s"],
            "first_loss": s["losses"][0],
            "last_loss": s["losses"][-1],
        }
        for s in singles
    ]
    rows += [
        {
            "system": f"GPipe, torch.distributed.pipelining ({pipe['processes']} procs x 1 thread, gloo)",
            "samples_per_s": pipe["samples_per_s"],
            "ratio_to_one_process": pipe["samples_per_s"] / single["samples_per_s"],
            "first_loss": pipe["losses"][0],
            "last_loss": pipe["losses"][-1],
        },
        {
            "system": (
                f"1F1B, torch.distributed.pipelining ({interleaved['processes']} procs x 1 thread, gloo)"
            ),
            "samples_per_s": interleaved["samples_per_s"],
            "ratio_to_one_process": interleaved["samples_per_s"] / single["samples_per_s"],
            "first_loss": interleaved["losses"][0],
            "last_loss": interleaved["losses"][-1],
        },
    ]
    print_table(rows, ["system", "samples_per_s", "ratio_to_one_process", "first_loss", "last_loss"])
    print_loss_check(check)

    def plot(ax: Any) -> None:
        for s in singles:
            ax.plot(s["losses"], label=f"one process, {s['threads']} thread(s)")
        ax.plot(pipe["losses"], "--", label="GPipe (torch.distributed.pipelining)")
        ax.plot(interleaved["losses"], ":", label="1F1B (torch.distributed.pipelining)")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        ax.set_title(f"{cfg.preset}: {single['samples_per_s']:.0f} vs {pipe['samples_per_s']:.0f} samples/s")
        ax.legend()

    path = write_results(
        "baselines",
        config={
            **asdict(cfg),
            "steps": steps,
            "warmup": warmup,
            "smoke": args.smoke,
            "single_threads": thread_counts,
        },
        rows=[*rows, {"system": "loss_check", **check}],
        plot=plot,
        out_dir=args.out,
    )
    print(f"results: {path}")
    return 0 if check["equal"] and not math.isnan(check["rel_diff"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
