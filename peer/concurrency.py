"""How many microbatches one trainer keeps in flight.

Little's law gives the pipeline's knee: a pipeline whose bottleneck stage serves R samples/s, whose
microbatch of m samples takes T seconds to go forward and back through idle stages, has every stage
busy only if R x T / m microbatches are in flight, and then only if each call arrived exactly when
its peer freed up. They do not: routing is stochastic and call times vary, so one peer's queue runs
dry while another's is long. In a closed queueing network of K balanced stations (K serving peers),
N microbatches keep each station busy N / (N + K - 1) of the time (mean-value analysis, exponential
call times): for 85%, N = 5.7 (K - 1). So the swarm keeps its knee in flight plus a queue of
`QUEUE_PER_PEER` for every serving peer but one. Calls that vary less than exponentially do better.
Measured (docs/benchmarks.md, issue 13): 8 peers on 4 stages with 16 in flight (2 per trainer, the
knee) were busy ~2/3 of the time, as the formula says.

T is computed, not measured: each stage's compute for one microbatch at a peer of that stage's
average speed, summed. A round trip measured under load includes the queueing that more
microbatches in flight cause, and feeding it back grows the queue without bound.

The swarm's trainers share the total: each keeps its part.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

QUEUE_PER_PEER = 5
"""Microbatches in flight beyond the knee, per serving peer but one (see above)."""
MIN_IN_FLIGHT = 2
MAX_IN_FLIGHT = 16
"""A trainer holds every in-flight microbatch's activations, and the stage peers keep their forwards
within a bound; beyond this, memory costs more than the pipeline gains."""


def bottleneck_rate(stage_rates: Sequence[float]) -> float:
    """The pipeline's rate: its slowest stage's (0 when a stage has no measured peer)."""
    return min(stage_rates) if stage_rates else 0.0


def chain_seconds(peer_rates: Sequence[Sequence[float]], microbatch_size: int) -> float | None:
    """Seconds one microbatch spends computing on its way forward and back through idle stages: at
    each stage, `microbatch_size` samples at the mean rate (samples/s, forward and backward) of that
    stage's peers. None while a stage has no peer with a measured rate."""
    total = 0.0
    for rates in peer_rates:
        measured = [r for r in rates if r > 0]
        if not measured:
            return None
        total += microbatch_size / (sum(measured) / len(measured))
    return total if peer_rates else None


def microbatches_in_flight(
    *,
    stage_rates: Sequence[float],
    round_trip_s: float | None,
    microbatch_size: int,
    trainers: int,
    num_stages: int,
    serving_peers: int,
) -> int:
    """This trainer's share of what keeps every stage busy; `round_trip_s` is the unloaded chain
    (`chain_seconds`). Before anything is measured, one per stage: enough for each stage to have
    work while the others compute."""
    rate = bottleneck_rate(stage_rates)
    if round_trip_s is None or rate <= 0 or microbatch_size <= 0:
        wanted = float(num_stages)
    else:
        knee = rate * round_trip_s / microbatch_size
        wanted = (knee + QUEUE_PER_PEER * max(serving_peers - 1, 0)) / max(trainers, 1)
    return max(MIN_IN_FLIGHT, min(MAX_IN_FLIGHT, math.ceil(wanted)))
