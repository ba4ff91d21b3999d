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

A step is recorded before its own recording and apply happen, so the coordinator part booked with
step N is step N-1's tail. The five parts of step N add up to the time from step N-1's averaged to
step N's averaged: one whole cycle, so over a run they add up to the run's stepping time. The first
step after the coordinator starts has no previous cycle: its coordinator part is 0.
"""

from __future__ import annotations

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
