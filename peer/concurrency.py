"""How many microbatches one trainer keeps in flight.

Little's law: a pipeline whose bottleneck stage serves R samples/s, whose microbatch of m samples
takes T seconds to travel forward and back unloaded, is kept busy only with R x T / m microbatches
in flight. The swarm's trainers share that: each keeps its part, with headroom for the spread of
call times (a constant 2 starves a deep pipeline and floods a shallow one).

T is the unloaded round trip: a low percentile of recent microbatches' times, because times
measured under load include the queueing that more microbatches in flight cause (feeding them back
would only grow the queue).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

HEADROOM = 1.5
"""Spare microbatches in flight, as a factor: calls vary, and a stage with nothing queued idles."""
MIN_IN_FLIGHT = 2
MAX_IN_FLIGHT = 16
"""A trainer holds every in-flight microbatch's activations; beyond this, memory costs more than
the pipeline gains."""
ROUND_TRIP_WINDOW = 32
ROUND_TRIP_QUANTILE = 0.2


def bottleneck_rate(stage_rates: Sequence[float]) -> float:
    """The pipeline's rate: its slowest stage's (0 when a stage has no measured peer)."""
    return min(stage_rates) if stage_rates else 0.0


def microbatches_in_flight(
    *,
    stage_rates: Sequence[float],
    round_trip_s: float | None,
    microbatch_size: int,
    trainers: int,
    num_stages: int,
) -> int:
    """This trainer's share of what keeps every stage busy. Before anything is measured, one per
    stage: enough for each stage to have work while the others compute."""
    rate = bottleneck_rate(stage_rates)
    if round_trip_s is None or rate <= 0 or microbatch_size <= 0:
        wanted = float(num_stages)
    else:
        swarm_wide = rate * round_trip_s / microbatch_size
        wanted = HEADROOM * swarm_wide / max(trainers, 1)
    return max(MIN_IN_FLIGHT, min(MAX_IN_FLIGHT, math.ceil(wanted)))


class RoundTrips:
    """Recent microbatch round trips; `unloaded()` is their low quantile (None until measured)."""

    def __init__(self, window: int = ROUND_TRIP_WINDOW) -> None:
        self._times: deque[float] = deque(maxlen=window)

    def add(self, seconds: float) -> None:
        if seconds > 0 and math.isfinite(seconds):
            self._times.append(seconds)

    def unloaded(self) -> float | None:
        if len(self._times) < 3:
            return None
        ordered = sorted(self._times)
        return ordered[int(ROUND_TRIP_QUANTILE * (len(ordered) - 1))]
