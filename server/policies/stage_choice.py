"""Which stage a joining peer serves."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def choose_stage(
    stage_throughputs: Sequence[float],
    stage_peer_counts: Sequence[int],
    requested: int | None,
    admits: Callable[[int], bool] | None = None,
) -> int:
    """The stage a new peer joins: the one it asked for if valid, else the weakest one.

    "Weakest" is the lowest total measured throughput; a stage with no peers at all always comes
    first (it stalls the whole pipeline), and ties go to fewer peers, then to the lower index, so
    the choice is deterministic.

    With `admits` (whether one member more keeps a stage's averaging round within the step's budget:
    `averaging_pace.RoundBudget.admits` for a joiner whose upload nobody measured yet), the stages
    that would not admit it are passed over while any would, as the rebalancing plan passes over
    them. The weakest stage by rate is often the one whose round paces the step (the head stage,
    heavy in compute and in its sum): every joiner went there and the next decision moved members
    off it again, each copying a 184 MB stage twice. Simulated churn-100 at 1 h lifetimes, seeds
    0-2: 171, 184 and 182 samples/s placing by rate alone, 217, 221 and 230 with the budget.
    """
    num_stages = len(stage_throughputs)
    if num_stages == 0 or len(stage_peer_counts) != num_stages:
        raise ValueError("need one throughput and one peer count per stage")
    if requested is not None:
        if not 0 <= requested < num_stages:
            raise ValueError(f"stage {requested} does not exist; the run has stages 0..{num_stages - 1}")
        return requested
    candidates: Sequence[int] = range(num_stages)
    if admits is not None:
        admitted = [s for s in candidates if stage_peer_counts[s] == 0 or admits(s)]
        candidates = admitted or candidates
    return min(
        candidates,
        key=lambda s: (stage_peer_counts[s] > 0, stage_throughputs[s], stage_peer_counts[s], s),
    )
