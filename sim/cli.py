"""`python -m sim`: list the named scenarios, run one in a mode (or all three), or sweep the failure
rate across the three modes; prints a table and the JSON last, and with --write records the
figures through bench/report.py."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

from bench.report import print_table, write_results
from sim.fixed import simulate_fixed
from sim.results import RunReport
from sim.scenario import SCENARIOS, Scenario
from sim.swarm import SwarmSim

MODES = ("swarm", "static", "fixed")
COLUMNS = [
    "scenario",
    "mode",
    "lifetime_s",
    "bundle",
    "samples_per_s",
    "ideal_rate",
    "fraction_of_ideal",
    "steps",
    "moves",
    "samples_lost",
    "retries",
    "restarts",
    "wall_s",
]


def simulate(scenario: Scenario) -> RunReport:
    return simulate_fixed(scenario) if scenario.mode == "fixed" else SwarmSim(scenario).run()


def _lifetime(text: str) -> float | None:
    return None if text.lower() in ("none", "inf", "0") else float(text)


def _scenario(args: argparse.Namespace) -> Scenario:
    sc = SCENARIOS[args.scenario]
    changes: dict[str, Any] = {}
    for name in ("peers", "duration_s", "seed", "averaging", "target_batch_size", "bundle"):
        value = getattr(args, name)
        if value is not None:
            changes[name] = value
    if args.lifetime is not None:
        changes["mean_lifetime_s"] = _lifetime(args.lifetime)
    return dataclasses.replace(sc, **changes)


def _row(report: RunReport, scenario: Scenario) -> dict[str, Any]:
    # The bundle is in every row: it changes the figures, not only the run's wall time.
    return {**report.headline(), "lifetime_s": scenario.mean_lifetime_s, "bundle": scenario.bundle}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the named scenarios")
    for name in ("run", "sweep"):
        cmd = sub.add_parser(name)
        cmd.add_argument("scenario", choices=sorted(SCENARIOS))
        cmd.add_argument("--peers", type=int)
        cmd.add_argument("--duration", dest="duration_s", type=float, help="simulated seconds")
        cmd.add_argument("--seed", type=int)
        cmd.add_argument(
            "--averaging",
            choices=["peers", "all-to-all", "butterfly"],
            help="peers (the default): the coordinator's choice by a round's size; or every round so",
        )
        cmd.add_argument("--target-batch-size", dest="target_batch_size", type=int)
        cmd.add_argument(
            "--bundle",
            type=int,
            help=(
                "microbatches one simulated call carries (scale-10k bundles 4 to run in minutes; each call,"
                " and so a step's wave, is then 4x longer: about half the fraction of ideal of --bundle 1)"
            ),
        )
        cmd.add_argument("--write", action="store_true", help="record JSON (and a plot) under bench/results")
        cmd.add_argument(
            "--full", action="store_true", help="print every run's whole report, not only its row"
        )
    run = sub.choices["run"]
    run.add_argument("--mode", choices=[*MODES, "all"], default="swarm")
    run.add_argument("--lifetime", help="mean peer lifetime in seconds ('none': nobody dies)")
    sweep = sub.choices["sweep"]
    sweep.add_argument(
        "--lifetimes", default="600,1800,3600,14400,none", help="comma-separated mean lifetimes"
    )
    sweep.set_defaults(lifetime=None)
    args = parser.parse_args(argv)

    if args.command == "list":
        for name, sc in SCENARIOS.items():
            print(
                f"{name}: {sc.peers} peers, {sc.num_stages} stages of {sc.preset.name}, "
                f"{sc.duration_s:.0f}s, lifetime {sc.mean_lifetime_s}, calls of {sc.bundle} microbatch(es)"
            )
        return 0
    base = _scenario(args)
    if args.command == "run":
        modes = MODES if args.mode == "all" else (args.mode,)
        runs = [dataclasses.replace(base, mode=m) for m in modes]
    else:
        lifetimes = [_lifetime(t) for t in args.lifetimes.split(",")]
        runs = [dataclasses.replace(base, mode=m, mean_lifetime_s=life) for life in lifetimes for m in MODES]
    reports = []
    for scenario in runs:
        report = simulate(scenario)
        reports.append((scenario, report))
        print(
            f"{scenario.name} {scenario.mode} lifetime={scenario.mean_lifetime_s}: {report.wall_s:.1f}s",
            file=sys.stderr,
        )
    rows = [_row(r, sc) for sc, r in reports]
    print_table(rows, COLUMNS)
    payload = [r.to_dict() for _, r in reports] if args.full else rows
    if args.write:
        path = write_results(
            f"sim_{args.command}_{base.name}",
            config={"scenario": dataclasses.asdict(base), "runs": [r.to_dict() for _, r in reports]},
            rows=rows,
        )
        print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(payload, default=str))
    return 0
