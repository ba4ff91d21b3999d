"""The simulator against real runs: the same small scenarios run for real (a LocalSwarm of peers made
slower with `--slowdown` and paced with `--upload-mbps`) and in `sim`, fed the stage costs the real
peers measured on their own calls. They should agree on throughput within 15% and on which moves
rebalancing makes.

    python -m bench.sim_validation [--steps 8] [--warmup 2] [--match TEXT] [--smoke]

The simulator is given what a real run measures (each stage's seconds per sample, each peer's
slowdown and upload pace), not what it achieves: throughput, waiting, routing and the rebalancing
decisions are the simulator's own, which is what is validated.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.baselines import TrainConfig
from bench.efficiency import DEFAULT_SLOWDOWN, Scenario, Timing, calibrate_stage_seconds, run_scenario
from bench.report import RESULTS_DIR, print_table, write_results
from sim.devices import LinkClass, PeerKind
from sim.scenario import HOMOGENEOUS
from sim.scenario import Scenario as SimScenario
from sim.stages import StageModel
from sim.swarm import SwarmSim
from swarmhub.presets import get_preset
from swarmhub.run_settings import RunSettings

THROUGHPUT_TOLERANCE = 0.15
LOOPBACK = LinkClass(bandwidth=1.25e9, latency_s=0.0002)
"""Peers on one host: 10 Gbit/s and a fifth of a millisecond each way, as loopback roughly gives."""
MBIT = 125_000.0
DEFAULT_COMPRESSION = RunSettings.model_fields["compression"].default
"""What the real runs use: bench.efficiency creates them with the run settings' default codec."""
MOVE_EVENT = re.compile(r"^rebalance: \S+: stage (\d+) -> (\d+);")


def validation_scenarios(
    cfg: TrainConfig, peers: int, slowdown: float, held_upload_mbps: float | None = None
) -> list[Scenario]:
    """Small swarms: even, one slow peer that rebalancing should answer with a move (at two
    slownesses), and one stage whose server is held back by its upload rather than its compute.
    `held_upload_mbps`: that server's upload; None: `upload_for_half_rate`, which times a stage on
    this host first, so two runs of it may pace the server differently (6.4 and 5.9 Mbit/s on one
    host, one run after the other): an A/B of two commits pins it."""
    three = replace(cfg, num_stages=3)

    # 8 peers on 3 stages hold (3, 3, 2): a 4x slower peer on a stage of three makes the stage of two
    # the bottleneck's neighbour, and one move from a stage of three to it is the best placement.
    def one_slow(factor: float) -> list[float]:
        return [slowdown * (factor if p == 2 else 1.0) for p in range(peers)]

    uploads = {1: upload_for_half_rate(three, slowdown) if held_upload_mbps is None else held_upload_mbps}
    return [
        Scenario(name=f"homogeneous, {peers} peers, 3 stages", cfg=three, slowdowns=[slowdown] * peers),
        # 4x: the move gains about 10% at steady rates, at the policy's bar (a marginal decision);
        # 8x: it gains about 20%, a clear one.
        Scenario(name="one peer 4x slower, rebalancing on", cfg=three, slowdowns=one_slow(4.0)),
        Scenario(name="one peer 8x slower, rebalancing on", cfg=three, slowdowns=one_slow(8.0)),
        Scenario(
            name="a stage-1 server held to half its rate by its upload, rebalancing off",
            cfg=three,
            slowdowns=[slowdown] * peers,
            upload_mbps=uploads,
            servers_only=frozenset(uploads),
            rebalance=False,
        ),
    ]


def upload_for_half_rate(cfg: TrainConfig, slowdown: float) -> float:
    """Mbit/s that carries a middle stage's replies at about half the rate its compute allows at
    `slowdown` (from the cost model's seconds, so the figure is fixed before anything runs)."""
    model = StageModel.of(get_preset(cfg.preset), cfg.num_stages, cfg.seq_len, DEFAULT_COMPRESSION)
    reply_bytes = sum(model.reply_bytes[1])
    seconds = _nominal_stage_seconds(cfg) * slowdown
    return round(reply_bytes / (2 * seconds) / MBIT, 1)


def _nominal_stage_seconds(cfg: TrainConfig) -> float:
    """Seconds per sample of a middle stage of `cfg` on one core."""
    return calibrate_stage_seconds(cfg, repeats=3)[1]


def sim_scenario(scenario: Scenario, real: dict[str, Any], duration_s: float) -> SimScenario:
    """The simulated twin of a real run: its peers' slowdowns, paces and stages, the seconds per
    sample its peers measured for each stage (the calibration's where they measured none), and its
    measured coordinator time per step and, where no upload is paced, its averaging time."""
    cfg = scenario.cfg
    seconds = real["served_stage_seconds_per_sample"] or real["stage_seconds_per_sample"]
    split = real["step_time_split_s"]
    kinds = tuple(
        PeerKind(
            device="emulated",
            link="loopback",
            measured_flops=1.0 / slowdown,
            measured_link=dataclasses.replace(
                LOOPBACK,
                upload=scenario.upload_mbps[p] * MBIT if p in scenario.upload_mbps else None,
            ),
        )
        for p, slowdown in enumerate(scenario.slowdowns)
    )
    return SimScenario(
        name=scenario.name,
        preset=get_preset(cfg.preset),
        num_stages=cfg.num_stages,
        seq_len=cfg.seq_len,
        microbatch_size=cfg.microbatch_size,
        target_batch_size=cfg.batch_size,
        compression=DEFAULT_COMPRESSION,
        peers=len(kinds),
        mix=HOMOGENEOUS,
        kinds=kinds,
        stages=tuple(p % cfg.num_stages for p in range(len(kinds))),
        stage_flops=tuple(seconds),
        non_trainers=tuple(sorted(scenario.servers_only)),
        mode="swarm" if scenario.rebalance else "static",
        duration_s=duration_s,
        seed=scenario.seed,
        # What a step costs after its compute, as the real run measured it. On loopback the
        # averaging's transfers are next to nothing and what the real run measured is its own work
        # (encoding and summing the sums), which the simulator does not model: it goes here. With a
        # paced upload the measured averaging is mostly the paced pushes, which the simulator models
        # itself: the twin keeps the default apply, about what the unpaced runs measured.
        record_s=split.get("time_coordinator_s", 0.0),
        **({} if scenario.upload_mbps else {"apply_s": split.get("time_averaging_s", 0.0)}),
    )


def settled_rate(
    step_times: list[float], step_samples: list[int], move_times: list[float], steps: int, warmup: int
) -> float:
    """Samples/s over the first `steps` steps from the one the real benchmark would time first: after
    the warm-up and two steps after the last move (`bench.efficiency.settled_from`). A step counts
    its samples sent less those it lost, as the real rate does (`bench.efficiency.timed_rate`)."""
    times = step_times[:steps]
    if len(times) < 3:
        raise ValueError(f"the simulation closed {len(times)} steps; at least 3 are needed")
    move_steps = [sum(1 for t in times if t <= moved) for moved in move_times]
    first = max(warmup, min(max(move_steps, default=-1) + 2, len(times) - 2))
    return sum(step_samples[first : len(times)]) / (times[-1] - times[first - 1])


def as_run(scenario: Scenario, real: dict[str, Any]) -> Scenario:
    """The scenario with the upload paces its real run had: a kept run was paced at what the
    calibration said then, which a calibration now need not repeat."""
    paced = real.get("config", {}).get("upload_mbps")
    if not paced:
        return scenario
    return replace(scenario, upload_mbps={int(p): float(mbps) for p, mbps in paced.items()})


def real_moves(events: list[str]) -> list[tuple[int, int]]:
    return sorted((int(m[1]), int(m[2])) for e in events if (m := MOVE_EVENT.match(e)))


def compare(scenario: Scenario, real: dict[str, Any], timing: Timing) -> dict[str, Any]:
    steps = real["first_timed_step"] + real["steps_timed"]
    # Three times the real run's wall time: room for the twin's steps if it is up to 3x slower.
    twin = sim_scenario(scenario, real, 3.0 * real["wall_s"])
    report = SwarmSim(twin).run()
    sim_rate = settled_rate(
        report.step_times, report.step_samples, [m.t for m in report.moves], steps, timing.warmup
    )
    timed = range(real["first_timed_step"], steps)
    until = report.step_times[steps - 1]
    sim_moves = sorted((m.from_stage, m.to_stage) for m in report.moves if m.t <= until)
    moves = real_moves(real["events"])
    ratio = sim_rate / real["samples_per_s"]
    return {
        "scenario": scenario.name,
        "real_samples_per_s": real["samples_per_s"],
        "sim_samples_per_s": sim_rate,
        "sim_over_real": ratio,
        "throughput_agrees": abs(ratio - 1.0) <= THROUGHPUT_TOLERANCE,
        "real_samples_lost": real["samples_lost"],
        "sim_samples_lost": len(timed) * scenario.cfg.batch_size - sum(report.step_samples[i] for i in timed),
        "real_moves": moves,
        "sim_moves": sim_moves,
        "moves_agree": Counter(moves) == Counter(sim_moves),
        "stage_seconds_per_sample": twin.stage_flops,
        "upload_mbps": scenario.upload_mbps,
        "steps": steps,
        "real": {k: v for k, v in real.items() if k != "config"},
        "sim": report.headline(),
        "config": {**asdict(scenario), "cfg": asdict(scenario.cfg)},
    }


def _real_run(scenario: Scenario, timing: Timing, out: Path, reuse: bool) -> dict[str, Any]:
    """The real run's row, kept as JSON in `out` as soon as it is measured (a real run takes minutes;
    the twin can then be simulated again without it)."""
    slug = re.sub(r"[^a-z0-9]+", "-", scenario.name.lower()).strip("-")
    path = out / f"sim-validation-real_{slug}.json"
    if reuse and path.exists():
        return json.loads(path.read_text())
    real = run_scenario(scenario, timing)
    path.write_text(json.dumps(real, indent=2, default=str) + "\n")
    return real


COLUMNS = [
    "scenario",
    "real_samples_per_s",
    "sim_samples_per_s",
    "sim_over_real",
    "throughput_agrees",
    "real_samples_lost",
    "sim_samples_lost",
    "real_moves",
    "sim_moves",
    "moves_agree",
]


def main(argv: list[str] | None = None) -> int:
    summary = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m bench.sim_validation", description=summary)
    parser.add_argument("--slowdown", type=float, default=DEFAULT_SLOWDOWN)
    parser.add_argument("--peers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--microbatch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--match", default="", help="only the scenarios whose name has this text")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, 4 peers, a few steps")
    parser.add_argument(
        "--reuse-real",
        action="store_true",
        help="simulate against the real runs kept in --out by an earlier run instead of running them",
    )
    parser.add_argument(
        "--held-upload-mbps",
        type=float,
        help="the upload-bound scenario's server upload (default: half its stage's replies, as timed here)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.held_upload_mbps is not None and args.held_upload_mbps <= 0:
        parser.error(f"--held-upload-mbps must be positive, got {args.held_upload_mbps:g}")
    cfg = TrainConfig(
        preset="small",
        num_stages=3,
        batch_size=args.batch,
        microbatch_size=args.microbatch,
        seq_len=args.seq_len,
    )
    if args.smoke:
        args.slowdown, args.peers, args.steps, args.warmup = 2.0, 4, 4, 1
        cfg = TrainConfig(preset="tiny", num_stages=3, batch_size=16, microbatch_size=4, seq_len=32)
    cfg = replace(cfg, max_steps=args.steps)
    timing = Timing(steps=args.steps, warmup=args.warmup, churn_s=0.0)
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    for scenario in validation_scenarios(cfg, args.peers, args.slowdown, args.held_upload_mbps):
        if args.match in scenario.name:
            real = _real_run(scenario, timing, args.out, args.reuse_real)
            rows.append(compare(as_run(scenario, real), real, timing))
    print_table(rows, COLUMNS)

    def plot(ax: Any) -> None:
        labels = [r["scenario"] for r in rows]
        y = range(len(rows))
        ax.barh([i - 0.2 for i in y], [r["real_samples_per_s"] for r in rows], height=0.4, label="real")
        ax.barh([i + 0.2 for i in y], [r["sim_samples_per_s"] for r in rows], height=0.4, label="simulated")
        ax.set_yticks(list(y), labels, fontsize=6)
        ax.invert_yaxis()
        ax.set_xlabel("samples/s (settled)")
        ax.set_title(f"simulator vs real, {args.peers} peers at slowdown {args.slowdown:g}")
        ax.legend(fontsize=7)

    path = write_results(
        "sim-validation",
        config={k: v for k, v in vars(args).items() if k != "out"} | {"cfg": asdict(cfg)},
        rows=rows,
        plot=plot,
        out_dir=args.out,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
