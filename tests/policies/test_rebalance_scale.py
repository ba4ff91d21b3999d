"""choose_moves at scale: the same decisions as the straightforward reference, on work that grows
linearly with the swarm."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

import pytest

from server.policies import rebalance
from server.policies.rebalance import PeerLoad, Rebalance, choose_moves
from tests.policies import rebalance_reference


def random_swarm(rng: random.Random, *, peers: int, stages: int, ties: bool) -> list[PeerLoad]:
    """Peers on random stages, some unsettled, some with link caps and wide bounds; `ties` draws
    from a few exact values so equal keys (and their tie-breaks) are common."""
    loads = []
    for i in range(peers):
        throughput = rng.choice([1.0, 2.0, 3.0, 4.0]) if ties else rng.uniform(0.1, 10.0)
        lower = upper = None
        if rng.random() < 0.7:
            margin = rng.choice([0.5, 1.0]) if ties else rng.uniform(0.0, 2.0)
            lower, upper = max(0.0, throughput - margin), throughput + margin
        link = rng.choice([None, 10.0, 20.0, 40.0]) if ties else rng.choice([None, rng.uniform(5.0, 100.0)])
        loads.append(
            PeerLoad(
                peer_id=i,
                stage=rng.randrange(stages),
                throughput=throughput,
                lower=lower,
                upper=upper,
                settled=rng.random() < 0.85,
                queue_length=rng.randrange(3),
                link_rate=link,
            )
        )
    return loads


@pytest.mark.parametrize("seed", range(400))
def test_decisions_match_the_straightforward_reference(seed: int) -> None:
    rng = random.Random(seed)
    ties = seed % 2 == 0
    stages = rng.randint(2, 8)
    peers = random_swarm(rng, peers=rng.randint(stages, 120), stages=stages, ties=ties)
    if rng.random() < 0.2:
        empty = rng.randrange(stages)
        peers = [
            p if p.stage != empty else PeerLoad(**{**vars(p), "stage": (empty + 1) % stages}) for p in peers
        ]
    kwargs: dict[str, Any] = {"horizon_s": rng.choice([1.0, 30.0, 1000.0])}
    if rng.random() < 0.6:
        kwargs["stage_costs"] = [
            rng.choice([1.0, 2.0]) if ties else rng.uniform(0.5, 2.0) for _ in range(stages)
        ]
    if rng.random() < 0.6:
        kwargs["state_bytes"] = [rng.choice([0.0, 10.0, 100.0]) for _ in range(stages)]
    if rng.random() < 0.6:
        kwargs["bytes_per_sample"] = [
            rng.choice([1.0, 2.0, 5.0]) if ties else rng.uniform(0.5, 5.0) for _ in range(stages)
        ]
    # Exact equality: the same moves, and the same estimated rates, gain and planned placement.
    assert choose_moves(peers, stages, **kwargs) == rebalance_reference.choose_moves(peers, stages, **kwargs)


def policy_lines(decide: Callable[[], Rebalance | None]) -> tuple[int, Rebalance | None]:
    """Lines of `server/policies/rebalance.py` executed by `decide`: its work, counted, not timed."""
    lines = 0

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal lines
        lines += event == "line"
        return local

    def calls(frame: FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code.co_filename == rebalance.__file__ else None

    sys.settrace(calls)
    try:
        result = decide()
    finally:
        sys.settrace(None)
    return lines, result


def spread_swarm(peers: int, stages: int, *, empty: int | None) -> list[PeerLoad]:
    """Three device speeds and four link classes dealt round the stages, with 10% noise."""
    rng = random.Random(0)
    loads = []
    for i in range(peers):
        stage = i % stages
        throughput = rng.choice([1.0, 3.0, 8.0]) * rng.uniform(0.9, 1.1)
        loads.append(
            PeerLoad(
                peer_id=i,
                stage=stage + 1 if stage == empty else stage,
                throughput=throughput,
                lower=0.9 * throughput,
                upper=1.1 * throughput,
                settled=rng.random() < 0.9,
                queue_length=rng.randrange(3),
                link_rate=rng.choice([None, 2e7, 1e8, 1e9]),
            )
        )
    return loads


@pytest.mark.parametrize("empty", [None, 3], ids=["balancing", "an empty stage"])
def test_a_decision_over_thousands_of_peers_does_linear_work(empty: int | None) -> None:
    stages = 32
    # A model's cut: the first and last stages differ, the blocks between are alike.
    kwargs: dict[str, Any] = {
        "horizon_s": 30.0,
        "stage_costs": [2.0] + [1.0] * (stages - 2) + [3.0],
        "state_bytes": [1e8] * stages,
        "bytes_per_sample": [1e6] + [5e6] * (stages - 2) + [2e6],
    }
    work = {}
    for peers in (1_000, 10_000):
        swarm = spread_swarm(peers, stages, empty=empty)
        work[peers], plan = policy_lines(partial(choose_moves, swarm, stages, **kwargs))
        assert plan is not None and plan.moves
    assert work[10_000] <= 11 * work[1_000]
    # A few passes over the peers. Rating every peer on every stage, or every candidate for each
    # planned move, took over 400 lines a peer (and filling an empty stage re-summed the whole
    # swarm for each candidate, 2,000 a peer at 1,000 peers).
    assert work[10_000] <= 100 * 10_000
