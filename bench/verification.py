"""Verified computation: what spot checks cost an honest swarm, and how soon they catch a faulty peer.

Real swarms on this machine (`launch.local_swarm.LocalSwarm`: a coordinator and 5 peer processes
over loopback), the tiny preset on 2 stages with int8 activations, batch 64 in microbatches of 8,
peers pinned with `--stage` (3 on stage 0, 2 on stage 1) and rebalancing off, so every cell has the
same placement. Two parts, measured in one run:

1. Throughput: the honest swarm at each `spot_check_fraction`, the fractions taken in turn
   `--repeats` times, each round starting at another one, so drift on a shared machine falls on each
   alike; each cell is also set against the no-check cell of its own round. Per cell, over the steps
   after the warm-up: samples/s (the samples of the timed steps over the wall-clock time between
   their records), the check traffic as a share of the stage calls' traffic (spot_check_bytes over
   wire_bytes), and the check time share (spot_check_seconds over the steps' durations: call-seconds
   of checks, which run beside the pipeline, summed over the trainers, per second of step). Also:
   no mismatch and no ban in any honest cell, and the largest discrepancy two honest results had
   (spot_check_largest_agreeing) against the int8 tolerance.
2. Detection: the same placement with one stage-0 peer started with `--fault noise:0.5` (half its
   results corrupted; stage 0 keeps a third peer to referee), run until its `peer_faulty` event or
   `--cap` steps, `--detection-repeats` runs per fraction. Detection needs one corrupted result in a
   checked call, so the steps it takes scale as 1/(fault share x fraction); the issue's case, a peer
   corrupting 5% of its outputs, is reported as the measurement scaled by 0.5/0.05 (extrapolated,
   not measured). As a check of that scaling, the stage-0 forward calls up to the catch (the only
   stage-0 calls with a result to compare) times 2/3, the share of stage-0 checks the faulty peer
   takes part in as checked or as checker when calls spread evenly over 3 peers, is set beside its
   expectation 1/(0.5 x fraction).

    .venv/bin/python -m bench.verification [--steps N] [--repeats R] [--detection-repeats R] [--cap N]
                                           [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, print_table, write_results
from bench.wan import wall_rate
from launch.local_swarm import LocalSwarm
from peer.spot_checks import tolerance

RUN: dict[str, Any] = {
    "model_preset": "tiny",
    "num_stages": 2,
    "target_batch_size": 64,
    "microbatch_size": 8,
    "seq_len": 64,
    "compression": "int8",
}
HONEST: list[tuple[int, tuple[str, ...]]] = [(0, ()), (0, ()), (0, ()), (1, ()), (1, ())]
FAULT_SHARE = 0.5
ISSUE_SHARE = 0.05
"""The issue's faulty peer corrupts this share of its outputs; its detection time is extrapolated."""
FAULTY: list[tuple[int, tuple[str, ...]]] = [(0, ("--fault", f"noise:{FAULT_SHARE:g}")), *HONEST[1:]]
FAULTY_NAME = "local-0"
"""LocalSwarm names peers local-<index> in the order they start: the faulty one starts first."""
STAGE0_PEERS = 3
# The faulty peer is the checked one in 1/3 of stage-0 checks, and the checker in half the rest.
INVOLVEMENT = 1 / STAGE0_PEERS + (1 - 1 / STAGE0_PEERS) / (STAGE0_PEERS - 1)
THROUGHPUT_FRACTIONS = (0.0, 0.01, 0.02, 0.05)
DETECTION_FRACTIONS = (0.01, 0.02, 0.05)
FALSE_POSITIVE_KINDS = ("spot_check_mismatch", "peer_faulty", "peer_banned")
# Checkpoints are not part of a step's cost: the coordinator asks for none during a cell.
NO_CHECKPOINTS = {"SWARMHUB_CHECKPOINT_EVERY_STEPS": "100000"}
START_TIMEOUT_S = 180.0


def _timestamp(row: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(row["created_at"])


def _start(name: str, fraction: float, placement: list[tuple[int, tuple[str, ...]]], max_steps: int | None):
    swarm = LocalSwarm(heartbeat_timeout_s=5)
    swarm.start()
    run = swarm.create_run(
        name=name, max_steps=max_steps, rebalance=False, spot_check_fraction=fraction, **RUN
    )
    for stage, options in placement:
        swarm.start_peer("--stage", str(stage), *options)
    return swarm, run["id"]


def throughput_cell(fraction: float, *, steps: int, warmup: int) -> dict[str, Any]:
    """The honest swarm at `fraction`: `warmup` steps, then `steps` timed ones."""
    started = time.monotonic()
    swarm, run_id = _start(f"honest, checks {fraction:g}", fraction, HONEST, None)
    try:
        # One step past the warm-up: the timed window starts at a step's record.
        swarm.wait_for_steps(run_id, warmup + 1, timeout_s=START_TIMEOUT_S)
        first = len(swarm.steps(run_id))
        swarm.wait_for_steps(run_id, first + steps, timeout_s=START_TIMEOUT_S + 10 * steps)
        rows = swarm.steps(run_id)
        metrics = {
            name: {m["step"]: m["value"] for m in swarm.metrics(run_id, name)}
            for name in (
                "wire_bytes",
                "spot_check_calls",
                "spot_check_bytes",
                "spot_check_seconds",
                "spot_check_largest_agreeing",
            )
        }
        events = swarm.events(run_id)
        peers = swarm.peer_rows(run_id)
    except BaseException:
        print(swarm.logs())
        raise
    finally:
        swarm.stop()
    timed = rows[first - 1 :]
    counted = [r["step"] for r in timed[1:]]

    def total(name: str) -> float:
        return sum(metrics[name].get(step, 0.0) for step in counted)

    wire = total("wire_bytes")
    duration = sum(r["duration_s"] for r in timed[1:])
    return {
        "fraction": fraction,
        "samples_per_s": wall_rate(timed),
        "timed_steps": len(counted),
        "check_calls": total("spot_check_calls"),
        "all_check_calls": sum(metrics["spot_check_calls"].values()),
        "check_bytes_share": total("spot_check_bytes") / wire if wire else None,
        "check_time_share": total("spot_check_seconds") / duration if duration else None,
        "largest_agreeing": max(metrics["spot_check_largest_agreeing"].values(), default=0.0),
        "false_positive_events": [
            f"{e['kind']}: {e['message']}" for e in events if e["kind"] in FALSE_POSITIVE_KINDS
        ],
        "banned_peers": [p["name"] for p in peers if p["state"] == "banned"],
        "samples_lost": sum(r["samples_lost"] for r in timed[1:]),
        "wall_s": time.monotonic() - started,
    }


def detection_cell(fraction: float, *, cap: int) -> dict[str, Any]:
    """The swarm with a noisy stage-0 peer at `fraction`, until it is banned or `cap` steps pass."""
    started = time.monotonic()
    swarm, run_id = _start(f"noise:{FAULT_SHARE:g}, checks {fraction:g}", fraction, FAULTY, cap)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S + 10 * cap
        while True:
            banned = [e for e in swarm.events(run_id) if e["kind"] == "peer_faulty"]
            names = {p["id"]: p["name"] for p in swarm.peer_rows(run_id)} if banned else {}
            # Only the faulty peer's ban is a detection; any other is a false positive, kept below.
            caught = [e for e in banned if names.get(e["peer_id"]) == FAULTY_NAME]
            rows = swarm.steps(run_id)
            if caught or len(rows) >= cap:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(rows)} of {cap} steps, nobody caught; logs in {swarm.workdir}")
            if not any(p.alive() for p in swarm.peers):
                raise RuntimeError(f"every peer exited after {len(rows)} steps:\n{swarm.logs()}")
            time.sleep(0.5)
        if caught:
            # The step the catch happened in, recorded: training's start is read off step 0's record.
            rows = swarm.wait_for_steps(run_id, caught[0]["data"]["step"] + 1, timeout_s=START_TIMEOUT_S)
        run = swarm.run_detail(run_id)
        names = {p["id"]: p["name"] for p in swarm.peer_rows(run_id)}
        honest_bans = [
            f"step {e['data'].get('step')}, {e['data'].get('finding')}: {e['message']}"
            for e in swarm.events(run_id)
            if e["kind"] == "peer_faulty" and names.get(e["peer_id"]) != FAULTY_NAME
        ]
        checks = {m["step"]: m["value"] for m in swarm.metrics(run_id, "spot_check_calls")}
    except BaseException:
        print(swarm.logs())
        raise
    finally:
        swarm.stop()
    expected_calls = 1 / (FAULT_SHARE * fraction)
    cell: dict[str, Any] = {
        "fraction": fraction,
        "cap": cap,
        "caught": bool(caught),
        "expected_involved_calls": expected_calls,
        "honest_peers_banned": honest_bans,
        "wall_s": time.monotonic() - started,
    }
    if not caught:
        return {**cell, "steps_done": len(rows), "result": f"not caught within {cap} steps"}
    event = caught[0]
    step = event["data"]["step"]
    microbatches = sum(r["samples_sent"] // RUN["microbatch_size"] for r in rows if r["step"] <= step)
    # The step being trained when the mismatch was found counts whole: an upper bound by under a step.
    involved_calls = microbatches * INVOLVEMENT
    training_start = _timestamp(rows[0]) - dt.timedelta(seconds=rows[0]["duration_s"])
    return {
        **cell,
        "result": f"caught at step {step}",
        "finding": event["data"].get("finding"),
        "caught_step": step,
        "steps_to_detection": step + 1,
        "seconds_from_training_start": (_timestamp(event) - training_start).total_seconds(),
        "seconds_from_run_created": (_timestamp(event) - _timestamp(run)).total_seconds(),
        "checks_to_detection": sum(v for s, v in checks.items() if s <= step),
        "stage0_forward_calls": microbatches,
        "involved_calls": involved_calls,
        "involved_calls_vs_expected": involved_calls / expected_calls,
        "extrapolated_steps_at_issue_share": (step + 1) * FAULT_SHARE / ISSUE_SHARE,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.verification", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="timed steps per throughput cell")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="rounds over the throughput fractions")
    parser.add_argument("--detection-repeats", type=int, default=2, help="detection runs per fraction")
    parser.add_argument("--cap", type=int, default=150, help="steps a detection run may take")
    parser.add_argument("--smoke", action="store_true", help="one cell of each kind, a few steps")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    throughput_fractions, detection_fractions = THROUGHPUT_FRACTIONS, DETECTION_FRACTIONS
    if args.smoke:
        args.steps, args.warmup, args.repeats, args.detection_repeats, args.cap = 3, 1, 1, 1, 30
        # Every call checked: the one smoke detection cell should catch within a few steps.
        throughput_fractions, detection_fractions = (0.05,), (1.0,)
    os.environ.update(NO_CHECKPOINTS)

    cells: list[dict[str, Any]] = []
    for round_ in range(args.repeats):
        # Each round starts at another fraction, so no fraction is always the first after a pause.
        shift = round_ % len(throughput_fractions)
        for fraction in [*throughput_fractions[shift:], *throughput_fractions[:shift]]:
            print(f"throughput: round {round_ + 1}, fraction {fraction:g}...", flush=True)
            cells.append(throughput_cell(fraction, steps=args.steps, warmup=args.warmup))
    detections: list[dict[str, Any]] = []
    for round_ in range(args.detection_repeats):
        for fraction in detection_fractions:
            print(f"detection: round {round_ + 1}, fraction {fraction:g}...", flush=True)
            detections.append(detection_cell(fraction, cap=args.cap))

    limit = tolerance(RUN["compression"])
    base = [c["samples_per_s"] for c in cells if c["fraction"] == 0.0]
    base_rate = statistics.median(base) if base else None
    # Each cell against the no-check cell of its own round: drift between rounds cancels.
    per_round = len(throughput_fractions)
    for index, cell in enumerate(cells):
        same_round = cells[index - index % per_round : index - index % per_round + per_round]
        round_base = [c["samples_per_s"] for c in same_round if c["fraction"] == 0.0]
        cell["vs_no_checks_same_round"] = cell["samples_per_s"] / round_base[0] if round_base else None
    throughput_rows: list[dict[str, Any]] = []
    for fraction in throughput_fractions:
        same = [c for c in cells if c["fraction"] == fraction]
        rate = statistics.median(c["samples_per_s"] for c in same)
        shares = [c["check_bytes_share"] for c in same if c["check_bytes_share"] is not None]
        times = [c["check_time_share"] for c in same if c["check_time_share"] is not None]
        throughput_rows.append(
            {
                "part": "throughput",
                "fraction": fraction,
                "samples_per_s": rate,
                "vs_no_checks": rate / base_rate if base_rate else None,
                "vs_no_checks_paired": (
                    statistics.median(c["vs_no_checks_same_round"] for c in same) if base_rate else None
                ),
                "check_calls": sum(c["check_calls"] for c in same),
                "check_bytes_share": statistics.median(shares) if shares else None,
                "check_time_share": statistics.median(times) if times else None,
                "largest_agreeing": max(c["largest_agreeing"] for c in same),
                "tolerance": limit,
                "false_positives": sum(len(c["false_positive_events"]) for c in same),
                "honest_peers_banned": sum(len(c["banned_peers"]) for c in same),
                "measurements": [c["samples_per_s"] for c in same],
            }
        )
    detection_rows: list[dict[str, Any]] = []
    for fraction in detection_fractions:
        same = [d for d in detections if d["fraction"] == fraction]
        caught = [d for d in same if d["caught"]]
        steps = [d["steps_to_detection"] for d in caught]
        median_steps = statistics.median(steps) if len(caught) == len(same) else None
        detection_rows.append(
            {
                "part": "detection",
                "fraction": fraction,
                "cap": args.cap,
                "runs": len(same),
                "caught": len(caught),
                "results": [d["result"] for d in same],
                "findings": [d["finding"] for d in caught],
                "honest_bans": sum(len(d["honest_peers_banned"]) for d in same),
                "honest_peers_banned": [ban for d in same for ban in d["honest_peers_banned"]],
                "steps_to_detection": steps,
                "median_steps": median_steps,
                "median_seconds": (
                    statistics.median(d["seconds_from_training_start"] for d in caught)
                    if median_steps is not None
                    else None
                ),
                "mean_involved_calls": (
                    statistics.fmean(d["involved_calls"] for d in caught) if caught else None
                ),
                "expected_involved_calls": 1 / (FAULT_SHARE * fraction),
                "extrapolated_steps_at_issue_share": (
                    median_steps * FAULT_SHARE / ISSUE_SHARE if median_steps is not None else None
                ),
            }
        )

    print_table(
        throughput_rows,
        [
            "fraction",
            "samples_per_s",
            "vs_no_checks",
            "vs_no_checks_paired",
            "check_calls",
            "check_bytes_share",
            "check_time_share",
            "largest_agreeing",
            "tolerance",
            "false_positives",
            "honest_peers_banned",
        ],
    )
    print()
    print_table(
        detection_rows,
        [
            "fraction",
            "caught",
            "runs",
            "steps_to_detection",
            "median_steps",
            "median_seconds",
            "mean_involved_calls",
            "expected_involved_calls",
            "extrapolated_steps_at_issue_share",
            "honest_bans",
        ],
    )

    def plot(ax: Any) -> None:
        figure = ax.figure
        ax.remove()
        left, right = figure.subplots(1, 2)
        labels = [f"{r['fraction']:g}" for r in throughput_rows]
        left.bar(labels, [r["vs_no_checks_paired"] or 0 for r in throughput_rows], color="tab:blue")
        left.axhline(1.0, color="grey", linewidth=0.8)
        left.set_xlabel("spot_check_fraction")
        left.set_ylabel("samples/s vs no checks (same round, median)")
        left.set_title("Honest swarm: throughput", fontsize=9)
        for index, d in enumerate(detections):
            x = detection_fractions.index(d["fraction"])
            right.scatter(
                x + 0.1 * (index // len(detection_fractions)),
                d.get("steps_to_detection", d["cap"]),
                color="tab:green" if d["caught"] else "tab:red",
            )
        right.set_xticks(range(len(detection_fractions)), [f"{f:g}" for f in detection_fractions])
        right.set_xlabel("spot_check_fraction")
        right.set_ylabel("steps until banned")
        right.set_title(f"noise:{FAULT_SHARE:g} peer: detection (red: not caught)", fontsize=9)

    path = write_results(
        "verification_smoke" if args.smoke else "verification",
        config={
            **RUN,
            "smoke": args.smoke,
            "placement": {"honest": HONEST, "faulty": FAULTY},
            "rebalance": False,
            "timed_steps": args.steps,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "detection_repeats": args.detection_repeats,
            "cap": args.cap,
            "throughput_fractions": throughput_fractions,
            "detection_fractions": detection_fractions,
            "fault_share": FAULT_SHARE,
            "issue_share": ISSUE_SHARE,
            "involvement": INVOLVEMENT,
            "tolerance": limit,
            "cpus": len(os.sched_getaffinity(0)),
            "coordinator_env": NO_CHECKPOINTS,
        },
        rows=[
            *throughput_rows,
            *detection_rows,
            {"part": "details", "cells": cells, "detections": detections},
        ],
        plot=plot,
        out_dir=args.out,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
