"""Efficiency: SwarmHub's training rate as a fraction of what its peers' compute allows, and against
PyTorch's own 1F1B pipeline, in regimes where CPU contention does not decide the result.

Compute-bound shape (no slowdown): byte-level GPT d_model 256, 8 blocks, 8 heads (preset `small`),
seq 256, batch 32, microbatches of 4, AdamW; one process with 2 threads, `torch.distributed.
pipelining` `Schedule1F1B` over gloo (2 ranks x 1 thread), and SwarmHub with 2 peers on 2 stages
(the configuration of `swarmhub demo --preset small --peers 2 --stages 2 --microbatch-size 4
--seq-len 256`), measured one after the other in this run.

Emulated regime: every peer runs with `--slowdown k` (times a speed factor: 1, 2 or 4), which
stretches each compute call by sleeping (k - 1) times the compute thread's CPU time for it. A peer
then occupies a core for 1/k of its wall time, so with k = 10 (the default) 8 peers need 0.8 of a
core for their compute, leaving the rest of the machine's 2 cores to trainers, serialization and the
coordinator: each peer computes at the rate it would have on a device of its own, 10x slower than
one core. The ideal rate (bench.ideal) comes from those emulated rates: each stage's seconds per
sample as its peers measured their own calls in the swarm (one over their reported throughput, per
unit of slowdown, the median over the stage's peers), and the best placement of whole peers on
stages; its bottleneck stage's capacity is the ideal. Next to it, the calibrated ideal: the same
from seconds per sample measured once in this process at slowdown 1 (forward and backward of the
run's microbatch, one thread, median of several, no other load) times each peer's slowdown. It is
stricter: peers computing side by side on 2 cores run each kernel ~10% slower than one alone, and
their calls keep graphs and accumulate gradients, which a bare forward and backward do not.
A step ends at a barrier, so every step pays the
pipeline's fill and drain, for SwarmHub as for any synchronous pipeline: the emulated runs use
SWARM's regime of many microbatches a step (preset `small`, 256 samples of 128 tokens in
microbatches of 2; `swarm-ref` 256 samples of 64 tokens). A swarm is timed in the placement it
settles on: from the second step after its last rebalancing move (at least the warm-up), the moves'
cost showing in the run's wall time and in samples lost. Scenarios (8 peers): homogeneous; one peer 4x
slower, rebalancing on and off; three speeds (3 x 1, 3 x 2, 2 x 4), on and off; the `swarm-ref`
preset (a last stage several times heavier) with rebalancing. Peers start placed evenly by count
(peer p on stage p mod S), so what rebalancing gains shows; the rate of that start placement is
reported next to the ideal. With one slow peer on stages of equal cost and equal peer counts the
even start is already an optimal placement of whole peers (nothing to gain), so that scenario runs
8 peers on 3 stages (3, 3, 2) with the slow peer starting on a stage of two: a fast peer must move
there.

Churn: a homogeneous emulated swarm where every `--churn-every` seconds a random live peer is
SIGKILLed and a replacement (same options) started. It is compared with a fixed pipeline that must
restart from its last checkpoint when any member dies, which is modelled, not run
(`bench.ideal.fixed_pipeline_samples`), with figures that favour it: it trains at the ideal rate of
the same peers placed evenly (no communication or bubble), checkpoints for free after every step
(so a death costs it at most the step in progress), dies at the same moments as the swarm's
peers, and is back after a restart measured for real after the churn window
(`bench.baselines.pipeline_restart`: a 1F1B pipeline of the same model relaunched from its
checkpoint, one rank per core, until its first step is done), with no time to notice the death or to
find a replacement machine.

Rates: samples of the steps after the warm-up over the time between their commits (created_at of
the last warm-up step to that of the last step). Moves are `rebalance` events; samples lost to moves
are the samples_lost of each move's step and the next. The step-time split is the mean of the
per-step metrics time_compute_s, time_network_s, time_waiting_s, time_averaging_s and
time_coordinator_s over the timed steps, where the coordinator records them; next to it, the mean
over the same steps of how much of collecting the busiest stage's peers computed, on average and its
least and most busy peer (`busiest_stage_busy`, `server.policies.step_time.busiest_stage`).

    .venv/bin/python -m bench.efficiency [--slowdown 10] [--steps 30] [--churn-s 300] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import torch

from bench.baselines import TrainConfig, one_f_one_b, pipeline_restart, single_process
from bench.ideal import best_placement, even_placement, fixed_pipeline_samples, placement_rate
from bench.report import RESULTS_DIR, plot_measured_against_ideal, print_table, write_results
from launch.local_swarm import LocalSwarm
from peer.model import build_stage
from swarmhub.presets import get_preset

DEFAULT_SLOWDOWN = 10.0
STEP_TIME_METRICS = (
    "time_compute_s",
    "time_network_s",
    "time_waiting_s",
    "time_averaging_s",
    "time_coordinator_s",
)
BUSIEST_STAGE_METRICS = (
    "busiest_stage_busy_share",
    "busiest_stage_least_busy_share",
    "busiest_stage_most_busy_share",
)
CALIBRATION_REPEATS = 7


@dataclass(kw_only=True)
class Scenario:
    name: str
    cfg: TrainConfig
    slowdowns: list[float]
    """One per peer: its `--slowdown` (1: none)."""
    start: Literal["even", "auto"] = "even"
    """even: peer p asks for stage p mod S; auto: the coordinator places each peer as it joins."""
    rebalance: bool = True
    churn_every_s: float | None = None
    """Kill a random live peer this often and start a replacement (runs `churn_s`, not `steps`)."""
    seed: int = 0
    upload_mbps: dict[int, float] = field(default_factory=dict)
    """Peers (by index) whose upload is paced to this many Mbit/s (`--upload-mbps`)."""
    servers_only: frozenset[int] = frozenset()
    """Peers (by index) that serve their stage and drive no microbatches (`--no-trainer`)."""


@dataclass
class Timing:
    steps: int
    warmup: int
    churn_s: float
    stage_seconds: dict[tuple[str, int, int, int], list[float]] = field(default_factory=dict)
    """Calibrations already measured, by (preset, stages, microbatch, seq_len)."""


def calibrate_stage_seconds(cfg: TrainConfig, repeats: int = CALIBRATION_REPEATS) -> list[float]:
    """Each stage's seconds per sample at slowdown 1: forward and backward of one microbatch on one
    thread (as a peer computes), the median of `repeats` after one untimed pass."""
    preset = get_preset(cfg.preset)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(cfg.seed)
    try:
        seconds = []
        for s in range(cfg.num_stages):
            module = build_stage(preset, s, cfg.num_stages, cfg.seed)
            shape = (cfg.microbatch_size, cfg.seq_len)
            targets = torch.randint(0, preset.vocab_size, shape, generator=generator)
            if s == 0:
                x = torch.randint(0, preset.vocab_size, shape, generator=generator)
            else:
                x = torch.randn(*shape, preset.d_model, generator=generator, requires_grad=True)
            times = []
            for _ in range(repeats + 1):
                started = time.perf_counter()
                out = module(x)
                if module.is_last:
                    module.loss(out, targets).backward()
                else:
                    out.backward(torch.ones_like(out))
                times.append(time.perf_counter() - started)
                module.zero_grad(set_to_none=True)
            seconds.append(statistics.median(times[1:]) / cfg.microbatch_size)
    finally:
        torch.set_num_threads(previous)
    return seconds


def _commit_time(row: dict[str, Any]) -> float:
    return datetime.fromisoformat(row["created_at"].replace("Z", "+00:00")).timestamp()


def timed_rate(rows: list[dict[str, Any]], warmup: int) -> float:
    """Samples trained in the steps after `warmup` over the time between their commits."""
    timed = rows[warmup:]
    if warmup < 1 or not timed:
        raise ValueError("a rate needs at least one warm-up step and one timed step")
    elapsed = _commit_time(rows[-1]) - _commit_time(rows[warmup - 1])
    samples = sum(r["samples_sent"] - r["samples_lost"] for r in timed)
    return samples / elapsed if elapsed > 0 else 0.0


@dataclass(frozen=True)
class RateReading:
    """A peer's reported throughput (samples/s, forward and backward) at a moment, and its stage."""

    at: float
    peer_index: int
    stage: int
    throughput: float


def wait_reading_rates(
    swarm: LocalSwarm, run_id: int, count: int, timeout_s: float
) -> tuple[list[dict[str, Any]], list[RateReading]]:
    """`count` committed steps, and the peers' reported rates read every couple of seconds meanwhile
    (a reported rate is a moving average of the last few calls: one reading at the end would be
    the run's last calls, not its timed steps)."""
    readings: list[RateReading] = []
    deadline = time.monotonic() + timeout_s
    while True:
        now = time.time()
        for peer in swarm.peer_rows(run_id):
            if peer["stage"] is not None and peer["throughput"] > 0 and peer["left_at"] is None:
                index = int(peer["name"].removeprefix("local-"))
                readings.append(RateReading(now, index, peer["stage"], peer["throughput"]))
        rows = swarm.steps(run_id)
        if len(rows) >= count:
            return rows, readings
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{len(rows)} of {count} steps after {timeout_s:.0f}s; logs in {swarm.workdir}"
            )
        if not any(p.alive() for p in swarm.peers):
            raise RuntimeError(f"every peer exited after {len(rows)} steps; logs in {swarm.workdir}")
        time.sleep(2.0)


def served_stage_seconds(
    readings: list[RateReading], window: tuple[float, float], slowdowns: list[float], num_stages: int
) -> list[float]:
    """Each stage's seconds per sample at slowdown 1 as its peers measured their own calls during the
    timed `window` (a peer's throughput is one over its forward-plus-backward seconds per sample,
    emulated slowness included): the median over the stage's readings of 1 / (throughput x
    slowdown). Empty if a stage has no reading."""
    per_stage: list[list[float]] = [[] for _ in range(num_stages)]
    for r in readings:
        if window[0] <= r.at <= window[1] and r.peer_index < len(slowdowns):
            per_stage[r.stage].append(1.0 / (r.throughput * slowdowns[r.peer_index]))
    if not all(per_stage):
        return []
    return [statistics.median(seconds) for seconds in per_stage]


def settled_from(rows: list[dict[str, Any]], events: list[dict[str, Any]], warmup: int) -> int:
    """Index of the first timed step: after the warm-up and after the step of the last rebalancing
    move (a swarm is timed in the placement it settled on; the moves' cost is in `wall_s`). At least
    two steps are left timed."""
    move_steps = [e["data"]["step"] for e in events if e["kind"] == "rebalance" and "step" in e["data"]]
    after_moves = max(move_steps, default=-1) + 2
    return max(warmup, min(after_moves, len(rows) - 2))


def metric_means(
    swarm: LocalSwarm, run_id: int, timed_steps: set[int], names: tuple[str, ...]
) -> dict[str, float]:
    """The mean of each per-step metric in `names` over the timed steps that have it."""
    split = {}
    for name in names:
        values = [m["value"] for m in swarm.metrics(run_id, name) if m["step"] in timed_steps]
        if values:
            split[name] = statistics.fmean(values)
    return split


def _peer_options(scenario: Scenario, index: int) -> list[str]:
    options = []
    if scenario.slowdowns[index] > 1.0:
        options += ["--slowdown", f"{scenario.slowdowns[index]:g}"]
    if scenario.start == "even":
        options += ["--stage", str(index % scenario.cfg.num_stages)]
    if index in scenario.upload_mbps:
        options += ["--upload-mbps", f"{scenario.upload_mbps[index]:g}"]
    if index in scenario.servers_only:
        options.append("--no-trainer")
    return options


def _churn(swarm: LocalSwarm, scenario: Scenario, until: float) -> tuple[list[float], list[float]]:
    """Kill a random live peer every `churn_every_s` until `until`, starting a replacement at once;
    returns the kill times and the replacements' start times (the i-th is peer index N + i)."""
    assert scenario.churn_every_s is not None
    rng = random.Random(scenario.seed)
    kills: list[float] = []
    starts: list[float] = []
    while (next_kill := (kills[-1] if kills else time.time()) + scenario.churn_every_s) < until:
        time.sleep(max(0.0, next_kill - time.time()))
        victim = rng.choice([p for p in swarm.peers if p.alive()])
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()
        kills.append(time.time())
        swarm.start_peer(*victim.options)
        starts.append(time.time())
    time.sleep(max(0.0, until - time.time()))
    return kills, starts


def run_scenario(scenario: Scenario, timing: Timing) -> dict[str, Any]:
    cfg = scenario.cfg
    key = (cfg.preset, cfg.num_stages, cfg.microbatch_size, cfg.seq_len)
    if key not in timing.stage_seconds:
        timing.stage_seconds[key] = calibrate_stage_seconds(cfg)
    stage_seconds = timing.stage_seconds[key]
    ideal = best_placement(stage_seconds, scenario.slowdowns)
    start = even_placement(len(scenario.slowdowns), cfg.num_stages)
    churn = scenario.churn_every_s is not None
    started = time.monotonic()
    with LocalSwarm() as swarm:
        run = swarm.create_run(
            name=f"efficiency: {scenario.name}",
            **{**cfg.run_params(), "max_steps": None if churn else timing.steps},
            rebalance=scenario.rebalance,
        )
        for index in range(len(scenario.slowdowns)):
            swarm.start_peer(*_peer_options(scenario, index))
        kills: list[float] = []
        replacement_starts: list[float] = []
        rate_readings: list[RateReading] = []
        window_start = 0.0
        if churn:
            swarm.wait_for_steps(run["id"], timing.warmup, timeout_s=600)
            window_start = time.time()
            kills, replacement_starts = _churn(swarm, scenario, window_start + timing.churn_s)
            rows = swarm.steps(run["id"])
        else:
            rows, rate_readings = wait_reading_rates(swarm, run["id"], timing.steps, 300 + 180 * timing.steps)
        events = swarm.events(run["id"])
        finished = next((i for i, e in enumerate(events) if e["kind"] == "run_finished"), len(events))
        if churn:
            # The window is the churn period: steps committed in it, over its length.
            inside = [r for r in rows if window_start < _commit_time(r) <= window_start + timing.churn_s]
            rate = sum(r["samples_sent"] - r["samples_lost"] for r in inside) / timing.churn_s
            timed = inside
        else:
            first_timed = settled_from(rows, events, timing.warmup)
            rate = timed_rate(rows, first_timed)
            timed = rows[first_timed:]
        timed_steps = {r["step"] for r in timed}
        split = metric_means(swarm, run["id"], timed_steps, STEP_TIME_METRICS)
        busiest = metric_means(swarm, run["id"], timed_steps, BUSIEST_STAGE_METRICS)
    window = (_commit_time(rows[rows.index(timed[0]) - 1]), _commit_time(timed[-1])) if not churn else None
    served = served_stage_seconds(rate_readings, window, scenario.slowdowns, cfg.num_stages) if window else []
    during = events[:finished]
    moves = [e for e in during if e["kind"] == "rebalance"]
    move_steps = {e["data"]["step"] + d for e in moves if "step" in e["data"] for d in (0, 1)}
    # Without readings in the timed window (churn, or steps shorter than the reading interval), the
    # ideal falls back to the calibrated one.
    served_ideal = best_placement(served, scenario.slowdowns) if served else ideal
    result: dict[str, Any] = {
        "scenario": scenario.name,
        "samples_per_s": rate,
        "ideal_samples_per_s": served_ideal.rate,
        "ideal_from": "served" if served else "calibrated",
        "fraction_of_ideal": rate / served_ideal.rate,
        "ideal_placement": served_ideal.placement,
        "served_stage_seconds_per_sample": served,
        "calibrated_ideal_samples_per_s": ideal.rate,
        "fraction_of_calibrated_ideal": rate / ideal.rate,
        "calibrated_ideal_placement": ideal.placement,
        "start_placement_rate": placement_rate(stage_seconds, scenario.slowdowns, start),
        "stage_seconds_per_sample": stage_seconds,
        "moves": len(moves),
        "samples_lost_to_moves": sum(r["samples_lost"] for r in rows if r["step"] in move_steps),
        "samples_lost": sum(r["samples_lost"] for r in timed),
        "steps_timed": len(timed),
        "first_timed_step": timed[0]["step"] if timed else None,
        "step_time_split_s": split,
        "busiest_stage_busy": busiest,
        "failures": sum(1 for e in during if e["kind"] == "peer_lost"),
        "events": [f"{e['kind']}: {e['message']}" for e in events],
        "wall_s": time.monotonic() - started,
        "config": {**asdict(scenario), "cfg": asdict(cfg)},
    }
    if churn:
        result.update(
            _fixed_pipeline(scenario, stage_seconds, events, window_start, kills, replacement_starts, timing)
        )
    return result


def _restart_config(cfg: TrainConfig) -> TrainConfig:
    """The pipeline whose restart is measured: the run's model and shapes with one rank per core of this
    machine (on its own device no rank would wait for another's start-up), and a batch of two
    microbatches per stage (the steady step is subtracted; the batch only makes the measurement long)."""
    ranks = min(cfg.num_stages, os.cpu_count() or 1)
    return replace(cfg, num_stages=ranks, batch_size=2 * ranks * cfg.microbatch_size)


def _fixed_pipeline(
    scenario: Scenario,
    stage_seconds: list[float],
    events: list[dict[str, Any]],
    window_start: float,
    kills: list[float],
    replacement_starts: list[float],
    timing: Timing,
) -> dict[str, Any]:
    """The modelled fixed pipeline under the same deaths (see the module's docstring)."""
    cfg = scenario.cfg
    n = len(scenario.slowdowns)
    assigned = {
        e["message"].split(" serves")[0]: _commit_time(e) for e in events if e["kind"] == "stage_assigned"
    }
    delays = [
        assigned[f"local-{n + i}"] - t
        for i, t in enumerate(replacement_starts)
        if f"local-{n + i}" in assigned
    ]
    restart = pipeline_restart(_restart_config(cfg))
    rate = placement_rate(stage_seconds, scenario.slowdowns, even_placement(n, cfg.num_stages))
    samples = fixed_pipeline_samples(
        rate=rate,
        duration_s=timing.churn_s,
        deaths_s=[k - window_start for k in kills],
        restart_s=restart["restart_s"],
        checkpoint_every_s=cfg.batch_size / rate,
    )
    return {
        "kills": len(kills),
        "replacement_ready_s": delays,
        "fixed_pipeline_samples_per_s": samples / timing.churn_s,
        "fixed_pipeline_rate_without_deaths": rate,
        "fixed_pipeline_restart_s": restart["restart_s"],
        "fixed_pipeline_restart": restart,
        "fixed_pipeline_checkpoint_every_steps": 1,
    }


def compute_bound(cfg: TrainConfig, timing: Timing, rounds: int) -> list[dict[str, Any]]:
    """One process (2 threads), torch 1F1B (2 ranks x 1 thread) and SwarmHub (2 peers, 2 stages),
    interleaved for `rounds` rounds (this machine is shared: a neighbour's load then falls on every
    system alike); each system's median rate."""
    singles, pipes, swarms = [], [], []
    for _ in range(rounds):
        singles.append(single_process(cfg, timing.steps, timing.warmup, threads=2))
        pipes.append(one_f_one_b(cfg, timing.steps, timing.warmup))
        swarms.append(
            run_scenario(Scenario(name="compute-bound, 2 peers", cfg=cfg, slowdowns=[1.0, 1.0]), timing)
        )
    single = statistics.median(r["samples_per_s"] for r in singles)
    pipe = statistics.median(r["samples_per_s"] for r in pipes)
    swarm = sorted(swarms, key=lambda r: r["samples_per_s"])[len(swarms) // 2]
    rates = {
        "one process": [r["samples_per_s"] for r in singles],
        "1F1B": [r["samples_per_s"] for r in pipes],
        "SwarmHub": [r["samples_per_s"] for r in swarms],
    }
    return [
        {"system": "one process (2 threads)", "samples_per_s": single, "rounds": rates["one process"]},
        {
            "system": "torch 1F1B (2 ranks x 1 thread, gloo)",
            "samples_per_s": pipe,
            "first_loss": pipes[0]["losses"][0],
            "rounds": rates["1F1B"],
        },
        {
            **swarm,
            "system": "SwarmHub 2 peers x 1 thread",
            "samples_per_s": statistics.median(rates["SwarmHub"]),
            "rounds": rates["SwarmHub"],
            "vs_1f1b": statistics.median(rates["SwarmHub"]) / pipe,
            "vs_one_process": statistics.median(rates["SwarmHub"]) / single,
        },
    ]


def emulated_scenarios(
    cfg: TrainConfig, ref: TrainConfig, peers: int, slowdown: float, churn_every_s: float
) -> list[Scenario]:
    """The emulated scenarios; factors multiply `slowdown` (1: a peer at the emulated base speed)."""
    # On stages of equal cost a slow peer changes the best placement only where stages hold unequal
    # numbers of peers: 8 peers on 3 stages (3, 3, 2), the slow one starting on a stage of two.
    one_slow_cfg = replace(cfg, num_stages=3)
    one_slow = [4.0 if p == 2 else 1.0 for p in range(peers)]
    # 3 x 1, 3 x 2, 2 x 4 with 8 peers; the same proportions otherwise.
    three = sorted([1.0, 2.0, 4.0][min(2, 3 * p // peers)] for p in range(peers))
    speeds = [1.0] * peers

    def emulated(name: str, factors: list[float], **kw: Any) -> Scenario:
        return Scenario(name=name, cfg=kw.pop("cfg", cfg), slowdowns=[slowdown * f for f in factors], **kw)

    return [
        emulated(f"homogeneous, {peers} peers", speeds),
        emulated("one peer 4x slower (3 stages), rebalancing on", one_slow, cfg=one_slow_cfg),
        emulated(
            "one peer 4x slower (3 stages), rebalancing off", one_slow, cfg=one_slow_cfg, rebalance=False
        ),
        emulated("three speeds (1, 2, 4), rebalancing on", three),
        emulated("three speeds (1, 2, 4), rebalancing off", three, rebalance=False),
        emulated(f"{ref.preset}, even start, rebalancing on", speeds, cfg=ref),
        emulated(f"churn: a peer killed every {churn_every_s:g} s", speeds, churn_every_s=churn_every_s),
    ]


COLUMNS = [
    "system",
    "samples_per_s",
    "ideal_samples_per_s",
    "fraction_of_ideal",
    "start_placement_rate",
    "vs_1f1b",
    "moves",
    "samples_lost_to_moves",
    "fixed_pipeline_samples_per_s",
    "vs_fixed_pipeline",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.efficiency", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--slowdown", type=float, default=DEFAULT_SLOWDOWN, help="every peer's base --slowdown"
    )
    parser.add_argument("--peers", type=int, default=8)
    parser.add_argument("--stages", type=int, default=4, help="stages of the emulated runs")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--churn-every", type=float, default=30.0, help="seconds between kills")
    parser.add_argument("--churn-s", type=float, default=300.0, help="length of the churn window")
    parser.add_argument("--start", choices=["even", "auto"], default="even", help="initial placement")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, 4 peers, a few steps")
    parser.add_argument(
        "--only",
        choices=["compute", "emulated"],
        help="run only the compute-bound comparison, or only the emulated scenarios (churn included)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds of the compute-bound systems"
    )
    parser.add_argument(
        "--match", default="", help="run only the emulated scenarios whose name has this text"
    )
    parser.add_argument("--batch", type=int, default=256, help="samples per step of the emulated runs")
    parser.add_argument("--microbatch", type=int, default=2, help="microbatch size of the emulated runs")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sample of the emulated runs")
    parser.add_argument("--emulated-steps", type=int, default=12)
    parser.add_argument("--emulated-warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    shape = TrainConfig(preset="small", num_stages=2, batch_size=32, microbatch_size=4, seq_len=256)
    # A step ends at a barrier, so each one pays the pipeline's fill and drain: with 8 peers on 4
    # stages and 32 samples a step (8 microbatches) that is half of it, for any pipeline. Steps of
    # many microbatches are SWARM's regime; seq 128 keeps a step of 256 samples near 16 s.
    emulated_cfg = TrainConfig(
        preset="small",
        num_stages=args.stages,
        batch_size=args.batch,
        microbatch_size=args.microbatch,
        seq_len=args.seq_len,
    )
    # swarm-ref's head costs ~0.5 s per 256-token sample on one core: at slowdown 10 its stage would
    # make a step take minutes. Seq 64 keeps its stage costs' shape (the head is per token, as the
    # blocks mostly are) at a quarter of the time. The batch is the other scenarios': what a step
    # averages does not shrink with its tokens, and at half the batch as well (128 samples, steps
    # of ~60 s) the head's round of 4-5 members took 5-10% of every step on this machine's two
    # cores (docs/benchmarks.md, 2026-12-01).
    ref = replace(emulated_cfg, preset="swarm-ref", seq_len=64)
    if args.smoke:
        args.slowdown, args.peers, args.stages, args.churn_every, args.churn_s = 2.0, 4, 2, 8.0, 20.0
        args.steps, args.warmup, args.rounds, args.emulated_steps, args.emulated_warmup = 3, 1, 1, 3, 1
        shape = TrainConfig(preset="tiny", num_stages=2, batch_size=8, microbatch_size=4, seq_len=32)
        emulated_cfg = shape
        ref = replace(shape, preset="swarm-ref")
    shape = replace(shape, max_steps=args.steps)
    emulated_cfg = replace(emulated_cfg, max_steps=args.emulated_steps)
    ref = replace(ref, max_steps=args.emulated_steps)
    timing = Timing(steps=args.steps, warmup=args.warmup, churn_s=args.churn_s)
    emulated_timing = replace(
        timing, steps=args.emulated_steps, warmup=args.emulated_warmup, stage_seconds=timing.stage_seconds
    )

    rows: list[dict[str, Any]] = []

    def plot(ax: Any) -> None:
        plot_measured_against_ideal(
            ax,
            rows,
            [r["system"].replace(": ", ":\n") for r in rows],
            ideal_label="ideal (best placement's bottleneck)",
            title=f"slowdown {args.slowdown:g}, {args.peers} peers, {args.stages} stages unless named",
        )

    config = {k: v for k, v in vars(args).items() if k != "out"}

    def save() -> Path:
        """Write the rows measured so far: a run of the whole suite takes over an hour, and one
        stopped before its end (a timeout, a crash) keeps every scenario it finished."""
        return write_results(
            "efficiency",
            config={
                **config,
                "compute_bound": asdict(shape),
                "emulated": asdict(emulated_cfg),
                "swarm_ref": asdict(ref),
            },
            rows=rows,
            plot=plot,
            out_dir=args.out,
        )

    if args.only != "emulated":
        rows += compute_bound(shape, timing, args.rounds)
        save()
    scenarios = emulated_scenarios(emulated_cfg, ref, args.peers, args.slowdown, args.churn_every)
    chosen = [sc for sc in scenarios if args.match in sc.name] if args.only != "compute" else []
    if args.smoke:
        # The smoke run checks that every kind of scenario runs, on the suite's clock: a twin that
        # differs only by rebalancing off, or by its peers' speeds, runs the same code.
        chosen = [
            sc for sc in chosen if sc.rebalance and not sc.name.startswith(("homogeneous", "three speeds"))
        ]
    for scenario in chosen:
        scenario.start = args.start
        result = run_scenario(scenario, emulated_timing)
        result["system"] = f"SwarmHub: {scenario.name}"
        if "fixed_pipeline_samples_per_s" in result:
            fixed = result["fixed_pipeline_samples_per_s"]
            result["vs_fixed_pipeline"] = result["samples_per_s"] / fixed if fixed else None
        rows.append(result)
        save()
    print_table(rows, COLUMNS)
    swarm_rows = [r for r in rows if "moves" in r]
    print(
        f"moves per run: {[r['moves'] for r in swarm_rows]};"
        f" samples lost to moves: {sum(r['samples_lost_to_moves'] for r in swarm_rows)}"
    )
    path = save()
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
