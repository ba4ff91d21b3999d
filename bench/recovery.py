"""Recovery: how long a swarm takes to train at full pace again after losing a quarter of its peers.

A run of 8 peers (2 stages x 4) trains until it is warm; then a quarter of the peers (one per
stage, seeded choice) is removed at once, in two ways measured in one run each:
- killed (SIGKILL): their sockets close, so the coordinator notices at once;
- frozen (SIGSTOP): silent, noticed only by the heartbeat timeout (`--heartbeat-timeout`).
Reported per mode: seconds from the removal to the first step committed after it, and to the
moment the step rate is back to 90% of what the remaining peers sustain (the median rate of the
last steps of the run), samples recorded lost, and the step timeline (plotted).

    .venv/bin/python -m bench.recovery [--steps-before 15] [--steps-after 25] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import random
import signal
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, print_table, write_results
from launch.local_swarm import LocalSwarm

RECOVERED_FRACTION = 0.9


def _commit_times(steps: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(step, commit time in seconds since the epoch) from the step rows' created_at."""
    return [
        (s["step"], datetime.fromisoformat(s["created_at"].replace("Z", "+00:00")).timestamp()) for s in steps
    ]


def run_mode(
    mode: str, *, peers: int, steps_before: int, steps_after: int, heartbeat_timeout: float, seed: int
) -> dict[str, Any]:
    with LocalSwarm(heartbeat_timeout_s=heartbeat_timeout) as swarm:
        run = swarm.create_run(name=f"recovery {mode}", num_stages=2, max_steps=None, rebalance=False)
        procs = [swarm.start_peer("--stage", str(i % 2)) for i in range(peers)]
        swarm.wait_for_steps(run["id"], steps_before, timeout_s=300)
        rng = random.Random(seed)
        victims = [rng.choice(procs[0::2]), rng.choice(procs[1::2])][: max(1, peers // 4)]
        removed_at = time.time()
        for victim in victims:
            victim.process.send_signal(signal.SIGKILL if mode == "killed" else signal.SIGSTOP)
        at_removal = swarm.run_detail(run["id"])["current_step"]
        steps = swarm.wait_for_steps(run["id"], at_removal + steps_after, timeout_s=600)
        if mode == "frozen":
            for victim in victims:
                victim.process.send_signal(signal.SIGKILL)
        events = swarm.events(run["id"])
    times = _commit_times(steps)
    after = [(step, t) for step, t in times if t > removed_at]
    first_after = after[0][1] - removed_at
    durations = [b[1] - a[1] for a, b in itertools.pairwise(after)]
    tail = durations[len(durations) // 2 :]
    steady = statistics.median(tail)
    recovered_at = None
    for (_, t), d in zip(after[1:], durations, strict=True):
        if d <= steady / RECOVERED_FRACTION:
            recovered_at = t - removed_at
            break
    lost = sum(s["samples_lost"] for s in steps if s["step"] >= at_removal - 1)
    return {
        "mode": mode,
        "peers": peers,
        "removed": len(victims),
        "heartbeat_timeout_s": heartbeat_timeout,
        "first_step_after_s": first_after,
        "recovered_after_s": recovered_at,
        "steady_step_s_after": steady,
        "step_s_before": statistics.median(
            [b[1] - a[1] for a, b in itertools.pairwise(times) if b[1] < removed_at][-5:]
        ),
        "samples_lost": lost,
        "peer_lost_events": sum(1 for e in events if e["kind"] == "peer_lost"),
        "timeline": [(step, t - removed_at) for step, t in times],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peers", type=int, default=8)
    parser.add_argument("--steps-before", type=int, default=15)
    parser.add_argument("--steps-after", type=int, default=25)
    parser.add_argument("--heartbeat-timeout", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="4 peers, a few steps")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.smoke:
        args.peers, args.steps_before, args.steps_after, args.heartbeat_timeout = 4, 3, 4, 3.0
    rows = [
        run_mode(
            mode,
            peers=args.peers,
            steps_before=args.steps_before,
            steps_after=args.steps_after,
            heartbeat_timeout=args.heartbeat_timeout,
            seed=args.seed,
        )
        for mode in ("killed", "frozen")
    ]
    print_table(
        rows,
        [
            "mode",
            "peers",
            "removed",
            "step_s_before",
            "first_step_after_s",
            "recovered_after_s",
            "steady_step_s_after",
            "samples_lost",
        ],
    )

    def plot(axes: Any) -> None:
        for row in rows:
            xs = [t for _, t in row["timeline"]]
            axes.plot(xs, [step for step, _ in row["timeline"]], marker=".", label=row["mode"])
        axes.axvline(0, color="grey", linestyle="--", label="a quarter of the peers removed")
        axes.set_xlabel("seconds since removal")
        axes.set_ylabel("step committed")
        axes.legend()

    config = {k: v for k, v in vars(args).items() if k != "out"}
    path = write_results("recovery", config=config, rows=rows, plot=plot, out_dir=args.out)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
