"""A join storm against the run's state machine alone: `python -m bench.join_storm` has N peers join a
running run (24 stages of the `large` preset, rebalancing on) at a given rate, each ready as soon as it
is assigned, with the coordinator's tick every 0.5 s of simulated time. It reports the CPU time the
machine spent deciding and the swarm-view frames it sent (one frame per recipient): in the live
coordinator both hold up every channel's messages, as they share one event loop.

No processes, no database, no network: this isolates the decisions, the part of opening thousands of
channels that grows with the swarm squared when every join passes over every member."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, print_table, write_results
from server.live import TICK_INTERVAL_S as TICK_S
from server.policies.step_book import StepBook
from server.swarm import decisions as do
from server.swarm import inputs as on
from server.swarm.machine import RunMachine
from server.swarm.step_cycle import MachineSettings
from swarmhub.wire import RunSpec, StageReady, SwarmView


def machine(stages: int, preset: str) -> RunMachine:
    """A running run at step 5 (joiners are offered state sources, as in a live swarm)."""
    spec = RunSpec(
        run_id=1,
        name="join storm",
        model_preset=preset,
        dataset="python-stdlib",
        num_stages=stages,
        target_batch_size=1024,
        microbatch_size=4,
        seq_len=256,
        optimizer="adamw",
        learning_rate=1e-3,
        warmup_steps=0,
        weight_decay=0.0,
        compression="int8",
        max_steps=None,
    )
    return RunMachine(
        spec=spec,
        status="active",
        data_key="k",
        book=StepBook(step=5, target_batch_size=1024, microbatch_size=4, next_sample=0),
        rebalance=True,
        settings=MachineSettings(
            heartbeat_timeout_s=60.0,
            heartbeat_interval_s=5.0,
            checkpoint_every_steps=1000,
            averaging_deadline_s=60.0,
        ),
        last_apply={},
        now=0.0,
    )


def storm(peers: int, *, stages: int, preset: str, joins_per_s: float) -> dict[str, Any]:
    run = machine(stages, preset)
    now = 0.0
    next_tick = TICK_S
    views = frames = 0
    busy_s = 0.0

    def feed(event: on.Input) -> None:
        nonlocal views, frames, busy_s
        started = time.process_time()
        out = run.handle(event)
        busy_s += time.process_time() - started
        for decision in out:
            if isinstance(decision, do.Send) and isinstance(decision.message, SwarmView):
                views += 1
                frames += len(decision.peer_ids)

    for peer_id in range(1, peers + 1):
        now = peer_id / joins_per_s
        while next_tick <= now:
            feed(on.Tick(now=next_tick))
            next_tick += TICK_S
        feed(
            on.PeerJoined(
                now=now,
                peer_id=peer_id,
                name=f"p{peer_id}",
                address=f"10.0.{peer_id // 250}.{peer_id % 250}:9000",
                throughput=10.0 + peer_id % 7,
                stage=None,
                requested_stage=None,
                probe_problem=None,
            )
        )
        stage = run.members[peer_id].stage
        assert stage is not None
        feed(on.PeerSaid(now=now, peer_id=peer_id, message=StageReady(stage=stage, step=5, origin="copied")))
    feed(on.Tick(now=next_tick))
    sizes = [len(run.ready(s)) for s in range(stages)]
    return {
        "peers": peers,
        "machine_cpu_s": busy_s,
        "per_join_ms": 1e3 * busy_s / peers,
        "view_messages": views,
        "view_frames": frames,
        "view_frames_per_join": frames / peers,
        "smallest_stage": min(sizes),
        "largest_stage": max(sizes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.join_storm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", default="1000,2000,5000", help="storm sizes, comma-separated")
    parser.add_argument("--stages", type=int, default=24)
    parser.add_argument("--preset", default="large")
    parser.add_argument("--joins-per-s", type=float, default=200.0, help="simulated arrival rate")
    parser.add_argument("--label", default="", help="appended to the result's name (e.g. before, after)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.peers.split(",")]
    rows = []
    for peers in sizes:
        rows.append(storm(peers, stages=args.stages, preset=args.preset, joins_per_s=args.joins_per_s))
        print(f"{peers} peers: {rows[-1]['machine_cpu_s']:.2f} s", flush=True)
    print_table(rows, list(rows[0]))

    def plot(ax: Any) -> None:
        ax.plot([r["peers"] for r in rows], [r["machine_cpu_s"] for r in rows], "o-")
        ax.set_xlabel("peers joining")
        ax.set_ylabel("state machine CPU seconds")
        ax.set_title(f"join storm at {args.joins_per_s:g}/s, {args.stages} stages ({args.preset})")

    name = "join_storm" + (f"-{args.label}" if args.label else "")
    path = write_results(
        name,
        config={
            "peers": sizes,
            "stages": args.stages,
            "preset": args.preset,
            "joins_per_s": args.joins_per_s,
            "tick_s": TICK_S,
        },
        rows=rows,
        plot=plot,
        out_dir=args.out,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
