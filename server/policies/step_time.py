"""Where a global step's wall time goes: serving peers computing, the network, waiting, averaging,
the coordinator.

A step's time is cut at three moments the coordinator sees itself:
- opened: the step opens (every member applied the previous update);
- barrier: all its samples are in and averaging starts (`StepBarrier`);
- averaged: every stage's round is complete and the step is recorded (`RecordStep`).

- collecting = opened -> barrier, split in three:
  - compute = the mean busy time of the step's serving peers: the served calls' compute seconds
    (what each serving peer says it spent computing, `ServedCall.compute_seconds`) summed over the
    step's finished microbatches, over the number of distinct serving peers, capped at collecting;
  - network = the mean network time per serving peer, the same way: the served calls' network
    seconds (each trainer's wait less the time the call spent inside the serving peer,
    `ServedCall.network_seconds`) over the same serving peers, capped at collecting - compute;
  - waiting = collecting - compute - network: queueing at the serving peers, idle slots,
    microbatches that failed.
- averaging = barrier -> averaged (every round, restarts and deadlines included).
- coordinator = the rest: recording the previous step, its database confirmation, applying it, and
  opening this step (the previous step's averaged -> this step's opened).

The split says how long the serving peers were busy on average, not whether the pipeline's slowest
stage was: `busiest_stage` takes the stage whose ready peers computed the largest share of the
collecting on average, and says how unevenly its calls were split. A stage of equal peers whose least
and most busy peers differ widely had some peers idle while one worked off its queue, and collecting
ended when that queue did.

A step is recorded before its own recording and apply happen, so the coordinator part booked with
step N is step N-1's tail. The five parts of step N add up to the time from step N-1's averaged to
step N's averaged: one whole cycle, so over a run they add up to the run's stepping time. The first
step after the coordinator starts has no previous cycle: its coordinator part is 0.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class TimeSplit:
    compute_s: float
    network_s: float
    waiting_s: float
    averaging_s: float
    coordinator_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.network_s + self.waiting_s + self.averaging_s + self.coordinator_s


def split_step_time(
    *,
    previous_averaged: float | None,
    opened: float,
    barrier: float,
    averaged: float,
    compute_s: float,
    network_s: float,
    serving_peers: int,
) -> TimeSplit:
    """The five parts of one step's time from its moments (monotonic seconds) and the served calls'
    compute and network seconds (summed over the step's serving peers)."""
    collecting = max(0.0, barrier - opened)
    compute = min(_per_peer(compute_s, serving_peers), collecting)
    network = min(_per_peer(network_s, serving_peers), collecting - compute)
    return TimeSplit(
        compute_s=compute,
        network_s=network,
        waiting_s=collecting - compute - network,
        averaging_s=max(0.0, averaged - barrier),
        coordinator_s=max(0.0, opened - previous_averaged) if previous_averaged is not None else 0.0,
    )


def _per_peer(seconds: float, serving_peers: int) -> float:
    return max(0.0, seconds / serving_peers) if serving_peers else 0.0


@dataclass(frozen=True, kw_only=True)
class StageBusy:
    """The share of a step's collecting that the busiest stage's ready peers spent computing."""

    stage: int
    mean_share: float
    least_share: float
    most_share: float


def busiest_stage(
    compute_s: Mapping[int, float], stage_of: Mapping[int, int], collecting_s: float
) -> StageBusy | None:
    """The stage whose ready peers computed the largest mean share of `collecting_s` (ties: the lowest
    index), with its least and most busy peer's shares. `compute_s`: serving peer -> compute seconds
    of the step's finished calls; `stage_of`: each ready peer's stage (one that served nothing was
    idle: share 0; a peer that served and left is not counted). None when the step collected for no
    time or no ready peer computed."""
    if collecting_s <= 0:
        return None
    shares: dict[int, list[float]] = {}
    for peer_id, stage in stage_of.items():
        shares.setdefault(stage, []).append(min(1.0, max(0.0, compute_s.get(peer_id, 0.0)) / collecting_s))
    means = {stage: statistics.fmean(values) for stage, values in shares.items()}
    if not any(means.values()):
        return None
    stage = min(means, key=lambda s: (-means[s], s))
    return StageBusy(
        stage=stage, mean_share=means[stage], least_share=min(shares[stage]), most_share=max(shares[stage])
    )
