"""One member's own work in a stage's averaging round, without the network: encoding its sum for the
pushes (`peer.averaging.contribution`) and adding the K sums with their norms (`summarize`), on one
thread, for a stage of the size a preset gives it. In a real round this runs on the member's compute
thread while the swarm waits for the slowest member, so on loopback it is most of a round's time.

    python -m bench.averaging_work [--preset swarm-ref] [--stages 4] [--stage -1] [--members 5]

Prints one JSON object: the stage's parameters and the best of `--repeats` seconds for each part.
To compare two trees, run it in each, in turn, several times (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch

from peer.averaging import Contribution, contribution, summarize
from peer.frame_headers import PushGrads
from swarmhub.presets import get_preset
from swarmhub.stage_cost import stage_parameters


def best_seconds(work: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="swarm-ref")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--stage", type=int, default=-1, help="which stage (default: the last, the head)")
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--codec", default="none")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)  # a peer's compute thread
    parameters = stage_parameters(get_preset(args.preset), args.stages)[args.stage]
    generator = torch.Generator().manual_seed(0)
    sums = {m: torch.randn(parameters, generator=generator) * 1e-3 for m in range(args.members)}
    header = PushGrads(run_id=1, sender=0, stage=0, step=0, attempt=0, counted=["0:0"])
    held = {m: Contribution(grads=g, counted=[f"0:{m}"]) for m, g in sums.items()}
    encode_s = best_seconds(lambda: contribution(header, sums[0], args.codec), args.repeats)
    summarize_s = best_seconds(lambda: summarize(held), args.repeats)
    print(
        json.dumps(
            {
                "preset": args.preset,
                "stage_parameters": parameters,
                "members": args.members,
                "codec": args.codec,
                "contribution_s": round(encode_s, 4),
                "summarize_s": round(summarize_s, 4),
                "member_work_s": round(encode_s + summarize_s, 4),
            }
        )
    )


if __name__ == "__main__":
    main()
