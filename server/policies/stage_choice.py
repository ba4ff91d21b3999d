"""Which stage a joining peer serves."""

from __future__ import annotations

from collections.abc import Sequence


def choose_stage(
    stage_throughputs: Sequence[float], stage_peer_counts: Sequence[int], requested: int | None
) -> int:
    """The stage a new peer joins: the one it asked for if valid, else the weakest one.

    "Weakest" is the lowest total measured throughput; a stage with no peers at all always comes
    first (it stalls the whole pipeline), and ties go to fewer peers, then to the lower index, so
    the choice is deterministic.
    """
    num_stages = len(stage_throughputs)
    if num_stages == 0 or len(stage_peer_counts) != num_stages:
        raise ValueError("need one throughput and one peer count per stage")
    if requested is not None:
        if not 0 <= requested < num_stages:
            raise ValueError(f"stage {requested} does not exist; the run has stages 0..{num_stages - 1}")
        return requested
    return min(
        range(num_stages),
        key=lambda s: (stage_peer_counts[s] > 0, stage_throughputs[s], stage_peer_counts[s], s),
    )
