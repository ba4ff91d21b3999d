"""The simulator's figures, each written through bench/report.py (JSON and PNG) under bench/results:

    python -m sim.figures failures      # samples/s as the failure rate grows: SWARM, SWARM without
                                        # rebalancing, fixed pipelines restarting from checkpoints
    python -m sim.figures scale         # fraction of ideal at 100, 1,000 and 10,000 heterogeneous
                                        # peers; the coordinator's decision time and messages per second
    python -m sim.figures weak-stages   # rebalancing with several weak stages at once
    python -m sim.figures all [--quick] # --quick: shorter runs and smaller swarms, for a smoke test

Waits while /tmp/QUIET exists (another benchmark is being timed on this machine)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, print_table, write_results
from sim.cli import simulate
from sim.devices import PeerKind
from sim.results import RunReport
from sim.scenario import SCENARIOS, Scenario

QUIET = Path("/tmp/QUIET")
SAMPLES_PER_PEER_PER_STEP = 13.1
"""The scale runs grow the batch with the swarm (131,072 samples at 10,000 peers), so that a step
takes about as long at every size and each run closes many steps."""


PATTERNS = ("peers", "all-to-all")
"""The coordinator's choice by a round's size (butterfly from `butterfly_from_members`), and every
round all-to-all (what the peers did before `peer/butterfly.py`)."""


def _run(scenario: Scenario) -> RunReport:
    while QUIET.exists():
        time.sleep(30)
    report = simulate(scenario)
    print(f"  {scenario.name} {scenario.mode}: {report.wall_s:.1f} s of wall time", file=sys.stderr)
    return report


def failure_sweep(quick: bool) -> tuple[list[dict[str, Any]], Callable[[Any], None]]:
    base = SCENARIOS["churn-100"]
    lifetimes: Sequence[float | None] = (900.0, 1800.0, 3600.0, 7200.0, 14400.0, None)
    if quick:
        base = dataclasses.replace(base, peers=24, duration_s=1800.0)
        lifetimes = (900.0, None)
    rows = []
    for lifetime in lifetimes:
        for mode in ("swarm", "static", "fixed"):
            report = _run(dataclasses.replace(base, mode=mode, mean_lifetime_s=lifetime))
            rows.append(
                {
                    **report.headline(),
                    "mean_lifetime_s": lifetime,
                    "failures_per_peer_hour": 3600.0 / lifetime if lifetime else 0.0,
                }
            )

    def plot(ax: Any) -> None:
        for mode, label in (
            ("swarm", "SWARM"),
            ("static", "SWARM without rebalancing"),
            ("fixed", "fixed pipelines, restart on failure"),
        ):
            points = sorted(
                (r["failures_per_peer_hour"], r["samples_per_s"]) for r in rows if r["mode"] == mode
            )
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
        ax.set_xlabel("failures per peer-hour (1 / mean lifetime)")
        ax.set_ylabel("samples/s committed")
        ax.set_title(f"{base.peers} peers ({base.name}), {base.duration_s / 3600:g} simulated h each")
        ax.legend(fontsize=7)

    return rows, plot


def scale(quick: bool) -> tuple[list[dict[str, Any]], Callable[[Any], None]]:
    """Each size twice: averaging as the coordinator chooses it by a round's size (`PATTERNS`), and
    every round all-to-all."""
    base = SCENARIOS["scale-10k"]
    sizes = (100, 1000, 10_000)
    duration = 2 * 3600.0
    if quick:
        sizes, duration = (64, 256), 900.0
    rows = []
    for peers in sizes:
        batch = max(base.microbatch_size, round(SAMPLES_PER_PEER_PER_STEP * peers / base.microbatch_size))
        for averaging in PATTERNS:
            scenario = dataclasses.replace(
                base,
                name=f"scale-{peers}",
                peers=peers,
                target_batch_size=batch * base.microbatch_size,
                duration_s=duration,
                averaging=averaging,
                # Calls of one microbatch at every size: a bundle of 4 makes every call, and so a
                # microbatch's trip through the stages and the step's wave, 4x longer, and gave
                # 10,000 peers half the fraction of ideal that calls of one did (docs/benchmarks.md).
                bundle=1,
            )
            report = _run(scenario)
            coordinator = report.coordinator
            rows.append(
                {
                    **report.headline(),
                    **report.time_split(),
                    "peers": peers,
                    "averaging": averaging,
                    "target_batch_size": scenario.target_batch_size,
                    "bundle": scenario.bundle,
                    "simulated_s": duration,
                    "coordinator_messages_per_s": coordinator["messages_received_per_s"]
                    + coordinator["messages_sent_per_s"],
                    "view_endpoints_per_s": coordinator["view_endpoints_per_s"],
                    "decision_seconds_per_simulated_s": coordinator["decision_seconds_per_simulated_s"],
                    "decision_seconds": coordinator["decision_seconds"],
                    "decisions": coordinator["decisions"],
                }
            )

    def plot(ax: Any) -> None:
        width = 0.4
        for offset, (averaging, color) in enumerate(zip(PATTERNS, ("tab:blue", "tab:orange"), strict=True)):
            mine = [r for r in rows if r["averaging"] == averaging]
            xs = [i + (offset - 0.5) * width for i in range(len(mine))]
            ax.bar(xs, [r["fraction_of_ideal"] for r in mine], width, color=color, label=averaging)
            for x, r in zip(xs, mine, strict=True):
                ax.annotate(
                    f"{r['fraction_of_ideal']:.3f}\n{r['coordinator_messages_per_s']:,.0f} msg/s\n"
                    f"{1000 * r['decision_seconds_per_simulated_s']:.2f} ms/s",
                    (x, r["fraction_of_ideal"]),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                )
        ax.set_xticks(range(len(sizes)), [f"{peers:,} peers" for peers in sizes])
        ax.set_ylim(0, 0.5)
        ax.legend(fontsize=7, title="averaging", title_fontsize=7)
        ax.set_ylabel("committed samples/s over the ideal placement's")
        ax.set_title(f"32 stages of a 7B model, spot GPUs, mean lifetime 4 h, {duration / 3600:g} h each")

    return rows, plot


def weak_stages(quick: bool) -> tuple[list[dict[str, Any]], Callable[[Any], None]]:
    """Three of eight stages start with a third of the peers the others have (the way joiners can
    pile up when many arrive at once); rebalancing has to fill all three together."""
    base = SCENARIOS["churn-100"]
    weak = {1, 4, 6}
    per_strong, per_weak = (12, 4) if quick else (27, 9)
    stages = tuple(s for s in range(base.num_stages) for _ in range(per_weak if s in weak else per_strong))
    kind = PeerKind(device="t4", link="datacenter")
    scenario = dataclasses.replace(
        base,
        name="weak-stages-1-4-6",
        peers=len(stages),
        kinds=(kind,) * len(stages),
        stages=stages,
        mean_lifetime_s=None,
        duration_s=1800.0 if quick else 3600.0,
        sample_every_s=60.0,
    )
    reports = {mode: _run(dataclasses.replace(scenario, mode=mode)) for mode in ("swarm", "static")}
    rows = [
        {
            **report.headline(),
            "start_placement": [stages.count(s) for s in range(base.num_stages)],
            "first_move_s": min((m.t for m in report.moves), default=None),
            "last_move_s": max((m.t for m in report.moves), default=None),
            "moves_to": {s: sum(1 for m in report.moves if m.to_stage == s) for s in range(base.num_stages)},
            "series": [dataclasses.asdict(row) for row in report.series],
        }
        for report in reports.values()
    ]

    def plot(ax: Any) -> None:
        for mode, label in (("swarm", "SWARM"), ("static", "without rebalancing")):
            series = reports[mode].series
            ax.plot([r.t / 60 for r in series], [r.fraction_of_ideal for r in series], label=label)
        for move in reports["swarm"].moves:
            ax.axvline(move.t / 60, color="tab:gray", alpha=0.15, lw=0.8)
        ax.set_xlabel("simulated minutes (grey: moves)")
        ax.set_ylabel("fraction of ideal (per minute)")
        ax.set_title(
            f"{len(stages)} T4 peers, stages 1, 4 and 6 start with {per_weak} peers, the others {per_strong}"
        )
        ax.legend(fontsize=7)

    return rows, plot


FIGURES: dict[str, Callable[[bool], tuple[list[dict[str, Any]], Callable[[Any], None]]]] = {
    "failures": failure_sweep,
    "scale": scale,
    "weak-stages": weak_stages,
}
COLUMNS = [
    "scenario",
    "mode",
    "peers",
    "averaging",
    "samples_per_s",
    "ideal_rate",
    "fraction_of_ideal",
    "moves",
    "samples_lost",
    "wall_s",
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("figure", choices=[*FIGURES, "all"])
    parser.add_argument("--quick", action="store_true", help="short runs of small swarms (a smoke test)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    for name in FIGURES if args.figure == "all" else (args.figure,):
        rows, plot = FIGURES[name](args.quick)
        print_table(rows, COLUMNS)
        path = write_results(
            f"sim-{name}", config={"quick": args.quick}, rows=rows, plot=plot, out_dir=args.out
        )
        print(f"results: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
