"""WAN links: samples/s and bytes per step by codec with every peer's upload capped by `tc`.

A real swarm per cell of the matrix (link rate x codec), all in one run: a coordinator and each
peer on a host of its own (Linux network namespaces on a bridge, 10.250.0.0/24, see
tests/multihost/netns.py), each peer started with the run page's join command word for word, each
peer host's egress capped with a `tc` token bucket at the cell's rate (the coordinator's host is
not capped). Rebalancing is off, so every cell keeps half the peers on each stage. The matrix is
run `--repeats` times, round after round, and each figure is the median over the rounds. Per cell,
over the steps after the warm-up:

- samples/s: the samples of the timed steps over the wall-clock time between their records;
- wire_bytes per step: the run's metric, the bytes of the trainers' stage calls (activations out,
  activation gradients back, request and reply frames); gradient averaging is not in it;
- averaging bytes per step: what a step's gradient averaging sends with the run's codec (real push
  frames, bench.compression.averaging_bytes_per_step);
- interface bytes per step: what the peer hosts' interfaces actually transmitted (kernel counters),
  everything together: stage calls to other hosts, averaging, heartbeats, probes. A trainer's calls
  to a stage on its own host never reach the interface;
- busiest link share: the busiest peer host's bytes per step at the capped rate, over the step's
  wall time (near 1: that upload is what limits the rate).

Needs root and iproute2, like the multi-host tests; one namespace LAN exists at a time (a lock).

    .venv/bin/python -m bench.wan [--rates 50 200] [--codecs none float16 int8] [--steps 20]
                                  [--repeats 3] [--smoke] [--out DIR]      # as root
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.baselines import TrainConfig
from bench.compression import averaging_bytes_per_step
from bench.report import RESULTS_DIR, print_table, write_results
from tests.multihost.netns import INTERFACE, Host, Lan, available, lan
from tests.multihost.swarm_hosts import HostedSwarm

CODEC_NAMES = ("none", "float16", "int8")
RATES_MBIT = (50.0, 200.0)
# Checkpoints are not part of a step's cost: the coordinator asks for none during a cell.
NO_CHECKPOINTS = {"SWARMHUB_CHECKPOINT_EVERY_STEPS": "100000"}


def tx_bytes(network: Lan, host: Host) -> int:
    """Bytes `host` has transmitted on its LAN interface."""
    shown = network.run(host, ["ip", "-j", "-s", "link", "show", INTERFACE])
    return int(json.loads(shown.stdout)[0]["stats64"]["tx"]["bytes"])


def wall_rate(steps: list[dict[str, Any]]) -> float:
    """Samples of steps[1:] over the time between the records of steps[0] and steps[-1]."""
    if len(steps) < 2:
        return 0.0
    first, last = (dt.datetime.fromisoformat(s["created_at"]) for s in (steps[0], steps[-1]))
    seconds = (last - first).total_seconds()
    samples = sum(s["samples_sent"] - s["samples_lost"] for s in steps[1:])
    return samples / seconds if seconds > 0 else 0.0


def run_cell(
    cfg: TrainConfig, *, mbit: float, codec: str, peers: int, steps: int, warmup: int
) -> dict[str, Any]:
    """One swarm on a fresh LAN: `peers` peer hosts capped at `mbit`, `warmup` + `steps` steps."""
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="swarmhub-wan-"))
    with lan() as network:
        hosted = HostedSwarm.start(network, workdir)
        swarm = hosted.swarm
        try:
            run = swarm.create_run(
                name=f"wan {mbit:g} Mbit/s {codec}",
                **{**cfg.run_params(), "max_steps": None},
                compression=codec,
                # A fixed placement (half the peers per stage): moving a peer mid-cell would move
                # its stage's state over the capped link and change the averaging groups.
                rebalance=False,
            )
            hosts = [network.add_host(f"peer-{i}", egress_mbit=mbit) for i in range(1, peers + 1)]
            for host in hosts:
                hosted.join(host, swarm.join_command)
            timeout = 90 + 5 * (warmup + steps)
            # One step past the warm-up: the timed window starts at a step's record.
            swarm.wait_for_steps(run["id"], warmup + 1, timeout_s=timeout)
            before = [tx_bytes(network, h) for h in hosts]
            first = len(swarm.steps(run["id"]))
            swarm.wait_for_steps(run["id"], first + steps, timeout_s=timeout)
            after = [tx_bytes(network, h) for h in hosts]
            rows = swarm.steps(run["id"])
            wire = {m["step"]: m["value"] for m in swarm.metrics(run["id"], "wire_bytes")}
            events = swarm.events(run["id"])
            peer_rows = swarm.peer_rows(run["id"])
        except BaseException:
            print(swarm.logs())
            raise
        finally:
            swarm.stop()
    # The counters were read between records: the window covers the steps recorded in it.
    counted = len(rows) - first
    timed = rows[first - 1 :]
    wire_timed = [wire[r["step"]] for r in timed[1:] if r["step"] in wire]
    sent = [b - a for a, b in zip(before, after, strict=True)]
    rate = wall_rate(timed)
    # How much of a step the busiest peer's capped upload was sending: near 1, the link limits.
    step_s = cfg.batch_size / rate if rate else 0.0
    busiest_s = max(sent) / counted / (mbit * 1e6 / 8) if counted else 0.0
    return {
        "mbit": mbit,
        "codec": codec,
        "samples_per_s": rate,
        "busiest_link_share": busiest_s / step_s if step_s else None,
        "samples_per_s_step_durations": (
            sum(r["samples_sent"] - r["samples_lost"] for r in timed[1:])
            / sum(r["duration_s"] for r in timed[1:])
        ),
        "wire_bytes_per_step": statistics.fmean(wire_timed) if wire_timed else None,
        "averaging_bytes_per_step": averaging_bytes_per_step(cfg, codec, peers),
        "interface_bytes_per_step": sum(sent) / counted if counted else None,
        "interface_bytes_per_step_by_host": [s / counted for s in sent] if counted else None,
        "timed_steps": counted,
        "losses": [r["loss"] for r in rows],
        "step_durations_s": [r["duration_s"] for r in rows],
        "samples_lost": sum(r["samples_lost"] for r in timed[1:]),
        # Keyed by address: every namespace shares the machine's host name, the peers' default name.
        "peer_links": {p["address"]: p.get("link_rates") for p in peer_rows},
        "peer_stages": {p["address"]: p["stage"] for p in peer_rows},
        "events": [f"{e['kind']}: {e['message']}" for e in events],
        "wall_s": time.monotonic() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per cell")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds over the matrix (drift falls on every cell)"
    )
    parser.add_argument("--rates", type=float, nargs="+", default=list(RATES_MBIT), help="Mbit/s per peer")
    parser.add_argument("--codecs", nargs="+", default=list(CODEC_NAMES), choices=CODEC_NAMES)
    parser.add_argument("--smoke", action="store_true", help="2 peers, 50 Mbit/s, int8, 1 timed step")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    reason = available()
    if reason is not None:
        parser.exit(2, f"cannot make hosts out of network namespaces: {reason}\n")
    if args.smoke:
        args.peers, args.steps, args.warmup, args.repeats = 2, 1, 0, 1
        args.rates, args.codecs = [50.0], ["int8"]
    cfg = TrainConfig(preset=args.preset, num_stages=args.stages)
    os.environ.update(NO_CHECKPOINTS)

    matrix = [(mbit, codec) for mbit in args.rates for codec in args.codecs]
    cells: list[dict[str, Any]] = []
    for _ in range(args.repeats):
        for mbit, codec in matrix:
            try:
                cell = run_cell(
                    cfg, mbit=mbit, codec=codec, peers=args.peers, steps=args.steps, warmup=args.warmup
                )
            except (TimeoutError, RuntimeError) as exc:
                # A cell whose swarm stopped stepping is a finding: recorded, and the matrix goes on.
                cell = {"mbit": mbit, "codec": codec, "error": str(exc)}
            cells.append(cell)

    def median(mbit: float, codec: str, key: str) -> float | None:
        values = [
            c[key] for c in cells if (c["mbit"], c["codec"]) == (mbit, codec) and c.get(key) is not None
        ]
        return statistics.median(values) if values else None

    def ratio(mbit: float, codec: str, key: str) -> float | None:
        value, base = median(mbit, codec, key), median(mbit, "none", key)
        return value / base if value is not None and base else None

    rows: list[dict[str, Any]] = []
    for mbit, codec in matrix:
        same = [c for c in cells if (c["mbit"], c["codec"]) == (mbit, codec)]
        rows.append(
            {
                "link": f"{mbit:g} Mbit/s",
                "codec": codec,
                "samples_per_s": median(mbit, codec, "samples_per_s"),
                "rate_vs_none": ratio(mbit, codec, "samples_per_s"),
                "wire_bytes_per_step": median(mbit, codec, "wire_bytes_per_step"),
                "averaging_bytes_per_step": median(mbit, codec, "averaging_bytes_per_step"),
                "interface_bytes_per_step": median(mbit, codec, "interface_bytes_per_step"),
                "interface_vs_none": ratio(mbit, codec, "interface_bytes_per_step"),
                "busiest_link_share": median(mbit, codec, "busiest_link_share"),
                "samples_per_s_step_durations": median(mbit, codec, "samples_per_s_step_durations"),
                "samples_lost": sum(c.get("samples_lost", 0) for c in same),
                "failed_cells": sum(1 for c in same if "error" in c),
                "measurements": [c.get("samples_per_s") for c in same],
            }
        )
    print_table(rows, [c for c in rows[0] if c != "measurements"])

    def plot(ax: Any) -> None:
        labels = [f"{r['link']}\n{r['codec']}" for r in rows]
        bars = ax.bar(labels, [r["samples_per_s"] or 0 for r in rows], color="tab:blue")
        for bar, row in zip(bars, rows, strict=True):
            megabytes = (row["interface_bytes_per_step"] or 0) / 1e6
            ax.annotate(f"{megabytes:.2f} MB/step", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)  # fmt: skip
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylabel("samples/s")
        ax.set_title(
            f"{cfg.preset}, {args.peers} peers on {cfg.num_stages} stages, each peer's upload capped (tc tbf)"
        )

    path = write_results(
        "wan_smoke" if args.smoke else "wan",
        config={
            **asdict(cfg),
            "peers": args.peers,
            "timed_steps": args.steps,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "rebalance": False,
            "rates_mbit": args.rates,
            "codecs": args.codecs,
            "smoke": args.smoke,
            "coordinator_env": NO_CHECKPOINTS,
            "link": "tc tbf on each peer namespace's egress (burst 10 ms, latency 200 ms); no added delay",
        },
        rows=[*rows, {"link": "details", "cells": cells}],
        plot=plot,
        out_dir=args.out,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
