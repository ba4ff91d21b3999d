"""How long the simulator takes for a large swarm: `python -m sim.scale_check [--duration S]` runs the
scale-10k scenario (10,000 peers, 32 stages) and prints its wall time, events per second and the
run's headline. Waits while /tmp/QUIET exists (other benchmarks are being timed on this machine)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from sim.scenario import SCENARIOS
from sim.swarm import SwarmSim

QUIET = Path("/tmp/QUIET")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="scale-10k", choices=sorted(SCENARIOS))
    parser.add_argument("--duration", type=float, help="simulated seconds (default: the scenario's)")
    parser.add_argument(
        "--bundle", type=int, help="microbatches per simulated call (default: the scenario's)"
    )
    args = parser.parse_args()
    scenario = SCENARIOS[args.scenario]
    if args.duration is not None:
        scenario = dataclasses.replace(scenario, duration_s=args.duration)
    if args.bundle is not None:
        scenario = dataclasses.replace(scenario, bundle=args.bundle)
    while QUIET.exists():
        time.sleep(30)
    report = SwarmSim(scenario).run()
    print(
        json.dumps(
            {
                "peers": scenario.peers,
                "stages": scenario.num_stages,
                "simulated_s": scenario.duration_s,
                "bundle": scenario.bundle,
                "wall_s": round(report.wall_s, 1),
                "events": report.events,
                "events_per_wall_s": round(report.events / report.wall_s),
                "headline": report.headline(),
                "decision_seconds": report.coordinator["decision_seconds"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
