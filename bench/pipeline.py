"""Pipeline throughput: SwarmHub against GPipe (torch.distributed.pipelining) and one process.

Same model, data, batch, microbatches and optimizer rule (see bench.baselines), same machine, in
one run. SWARM samples/s comes from the run's recorded steps after a warm-up: the sum of the
samples trained over the sum of the step durations. The ideal rate is the bottleneck stage's
capacity: for every stage the sum of its live peers' measured throughput (samples/s each peer
measured for its stage, polled from /api/runs/{id}/peers during the timed steps), the minimum
over stages. Scenarios: homogeneous peers; one peer `--slowdown 4` (rebalancing on and off); one
peer SIGKILLed and restarted in the middle of the run.

    .venv/bin/python -m bench.pipeline [--steps 30] [--peers 4] [--stages 2] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.baselines import TrainConfig, gpipe, loss_check, print_loss_check, single_process
from bench.report import RESULTS_DIR, plot_measured_against_ideal, print_table, write_results
from launch.local_swarm import LocalSwarm


@dataclass(kw_only=True)
class Scenario:
    name: str
    peers: int
    peer_options: dict[int, list[str]] = field(default_factory=dict)
    """Extra `swarmhub-peer join` options by peer index."""
    rebalance: bool = True
    compression: str = "none"
    kill_peer: int | None = None
    """Index of a peer to SIGKILL once `kill_after_step` steps are done, then start again."""
    kill_after_step: int = 0
    restart_after_s: float = 3.0


class ThroughputPoller:
    """Polls the run's peers every `interval_s` once the run has reached step `from_step`."""

    def __init__(
        self, swarm: LocalSwarm, run_id: int, num_stages: int, from_step: int, interval_s: float = 1.0
    ):
        self.client = httpx.Client(base_url=swarm.url, headers=dict(swarm.client.headers), timeout=10)
        self.run_id = run_id
        self.num_stages = num_stages
        self.from_step = from_step
        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ThroughputPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.client.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                run = self.client.get(f"/api/runs/{self.run_id}").json()
                if run.get("current_step", 0) < self.from_step or run.get("status") != "active":
                    continue
                peers = self.client.get(f"/api/runs/{self.run_id}/peers").json()
            except (httpx.HTTPError, ValueError):
                continue
            live = [p for p in peers if p["state"] == "active" and p["stage"] is not None]
            per_stage = [
                sum(p["throughput"] for p in live if p["stage"] == s) for s in range(self.num_stages)
            ]
            self.samples.append(
                {
                    "step": run.get("current_step"),
                    "stage_capacity": per_stage,
                    "peer_throughput": {p["name"]: p["throughput"] for p in live},
                }
            )

    def ideal(self) -> float:
        """Mean over polls of the bottleneck stage's capacity (polls where every stage was measured)."""
        values = [min(s["stage_capacity"]) for s in self.samples if min(s["stage_capacity"]) > 0]
        return statistics.fmean(values) if values else 0.0

    def mean_stage_capacity(self) -> list[float]:
        polls = [s["stage_capacity"] for s in self.samples if min(s["stage_capacity"]) > 0]
        return [statistics.fmean(p[s] for p in polls) if polls else 0.0 for s in range(self.num_stages)]


def run_swarm(cfg: TrainConfig, scenario: Scenario, steps: int, warmup: int) -> dict[str, Any]:
    """One SwarmHub run of `steps` global steps on a fresh local coordinator and peers."""
    started = time.monotonic()
    with LocalSwarm() as swarm:
        run = swarm.create_run(
            name=f"bench: {scenario.name}",
            **{**cfg.run_params(), "max_steps": steps},
            compression=scenario.compression,
            rebalance=scenario.rebalance,
        )
        for index in range(scenario.peers):
            swarm.start_peer(*scenario.peer_options.get(index, []))
        timeout = 120 + 20 * steps
        with ThroughputPoller(swarm, run["id"], cfg.num_stages, from_step=warmup) as poller:
            if scenario.kill_peer is not None:
                swarm.wait_for_steps(run["id"], scenario.kill_after_step, timeout_s=timeout)
                victim = swarm.peers[scenario.kill_peer]
                victim.process.send_signal(signal.SIGKILL)
                victim.process.wait()
                time.sleep(scenario.restart_after_s)
                swarm.start_peer(*victim.options)
            rows = swarm.wait_for_steps(run["id"], steps, timeout_s=timeout)
        wire = {m["step"]: m["value"] for m in swarm.metrics(run["id"], "wire_bytes")}
        events = swarm.events(run["id"])
    timed = rows[warmup:]
    samples = sum(r["samples_sent"] - r["samples_lost"] for r in timed)
    duration = sum(r["duration_s"] for r in timed)
    rate = samples / duration if duration else 0.0
    ideal = poller.ideal()
    # Peers leaving after the run finished (their channels close as the swarm stops) are not failures.
    finished = next((i for i, e in enumerate(events) if e["kind"] == "run_finished"), len(events))
    during = events[:finished]
    losses = [r["loss"] for r in rows]
    return {
        "scenario": scenario.name,
        "samples_per_s": rate,
        "ideal_samples_per_s": ideal,
        "fraction_of_ideal": rate / ideal if ideal else None,
        "stage_capacity": poller.mean_stage_capacity(),
        "throughput_polls": poller.samples,
        "losses": losses,
        "step_durations_s": [r["duration_s"] for r in rows],
        "wire_bytes_per_step": [wire.get(r["step"]) for r in rows],
        "samples_lost": sum(r["samples_lost"] for r in rows),
        "failures": sum(1 for e in during if e["kind"] == "peer_lost"),
        "rebalances": sum(1 for e in during if e["kind"] == "rebalance"),
        "events": [f"{e['kind']}: {e['message']}" for e in events],
        "wall_s": time.monotonic() - started,
        "config": asdict(scenario),
    }


def scenarios(peers: int, steps: int, smoke: bool) -> list[Scenario]:
    homogeneous = Scenario(name="homogeneous", peers=peers)
    if smoke:
        return [homogeneous]
    slow = {peers - 1: ["--slowdown", "4"]}
    return [
        homogeneous,
        Scenario(name="heterogeneous (1 peer 4x slower), rebalancing on", peers=peers, peer_options=slow),
        Scenario(
            name="heterogeneous (1 peer 4x slower), rebalancing off",
            peers=peers,
            peer_options=slow,
            rebalance=False,
        ),
        Scenario(
            name="peer SIGKILLed and restarted", peers=peers, kill_peer=0, kill_after_step=max(2, steps // 3)
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="2 peers, homogeneous only, a few steps")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    steps, warmup, peers = (4, 1, 2) if args.smoke else (args.steps, args.warmup, args.peers)
    cfg = TrainConfig(preset=args.preset, num_stages=args.stages, max_steps=steps)

    # The machine is shared and its load drifts: each SWARM run is compared with a single-process and
    # a GPipe measurement taken just before it, and the ratios use those adjacent measurements.
    singles: list[dict[str, Any]] = []
    pipes: list[dict[str, Any]] = []
    swarm_runs: list[dict[str, Any]] = []
    for scenario in scenarios(peers, steps, args.smoke):
        singles.append(single_process(cfg, steps, warmup, threads=1))
        pipes.append(gpipe(cfg, steps, warmup))
        swarm_runs.append(run_swarm(cfg, scenario, steps, warmup))
    check = loss_check(singles[0], pipes[0])

    def mean_rate(results: list[dict[str, Any]]) -> float:
        return statistics.fmean(r["samples_per_s"] for r in results)

    one = mean_rate(singles)
    rows: list[dict[str, Any]] = [
        {
            "system": "one process (1 thread)",
            "samples_per_s": one,
            "vs_one_process": 1.0,
            "measurements": [r["samples_per_s"] for r in singles],
        },
        {
            "system": f"GPipe ({cfg.num_stages} procs x 1 thread)",
            "samples_per_s": mean_rate(pipes),
            "vs_one_process": statistics.fmean(
                p["samples_per_s"] / s["samples_per_s"] for p, s in zip(pipes, singles, strict=True)
            ),
            "measurements": [r["samples_per_s"] for r in pipes],
        },
    ]
    for r, single, pipe in zip(swarm_runs, singles, pipes, strict=True):
        rows.append(
            {
                "system": f"SWARM {peers} peers: {r['scenario']}",
                "samples_per_s": r["samples_per_s"],
                "vs_one_process": r["samples_per_s"] / single["samples_per_s"],
                "vs_gpipe": r["samples_per_s"] / pipe["samples_per_s"],
                "ideal_samples_per_s": r["ideal_samples_per_s"],
                "fraction_of_ideal": r["fraction_of_ideal"],
                "failures": r["failures"],
                "samples_lost": r["samples_lost"],
                "rebalances": r["rebalances"],
                "adjacent_one_process": single["samples_per_s"],
                "adjacent_gpipe": pipe["samples_per_s"],
            }
        )
    columns = [
        "system",
        "samples_per_s",
        "vs_one_process",
        "vs_gpipe",
        "ideal_samples_per_s",
        "fraction_of_ideal",
        "failures",
        "samples_lost",
        "rebalances",
        "adjacent_one_process",
        "adjacent_gpipe",
    ]
    print_table(rows, columns)
    print_loss_check(check)
    print(f"SWARM first-step loss (homogeneous): {swarm_runs[0]['losses'][0]:.6f}")

    def plot(ax: Any) -> None:
        plot_measured_against_ideal(
            ax,
            rows,
            [r["system"].replace("SWARM ", "SWARM\n").replace(": ", ":\n") for r in rows],
            ideal_label="ideal (bottleneck stage capacity)",
            title=f"{cfg.preset}, {cfg.num_stages} stages, batch {cfg.batch_size}",
        )

    path = write_results(
        "pipeline",
        config={**asdict(cfg), "steps": steps, "warmup": warmup, "peers": peers, "smoke": args.smoke},
        rows=[
            *rows,
            {"system": "loss_check", **check},
            {"system": "details", "single": singles, "gpipe": pipes, "swarm": swarm_runs},
        ],
        plot=plot,
        out_dir=args.out,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
