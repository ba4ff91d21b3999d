"""How many microbatches the coordinator lets be granted and unfinished at once.

Each trainer keeps at least `MIN_IN_FLIGHT` microbatches in flight (`peer/concurrency.py`), so a
swarm of thousands of trainers asks for a whole step's microbatches the moment it opens. They then
queue at the stages' peers, and the last call in a queue waits about as long as the step takes to
go through its slowest stage: once that passes the trainers' call timeout, calls time out in the
queue, are retried elsewhere (queueing again) and microbatches fail. So the coordinator paces its
grants. The pipeline itself holds its knee (Little's law: the slowest stage's rate times one
microbatch's unloaded trip through the stages); whatever is outstanding beyond that waits in queues,
at worst all at the slowest stage, and there it must start within a share of the call timeout. A
small swarm's trainers ask for far fewer than that, so it paces nothing there.

A peer's rate here is what it serves: its measured compute rate, capped by what its link carries
(`link_rate` over the stage's bytes per sample), since a peer on a slow link serves no faster than
its transfers, whatever its device computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from swarmhub.settings import PeerSettings

CALL_TIMEOUT_S: float = PeerSettings.model_fields["call_timeout_s"].default
"""The trainers' call timeout, as peers run by default (the coordinator is not told theirs)."""
QUEUE_SHARE_OF_TIMEOUT = 0.5
"""Share of a call's timeout its wait in a queue may take; the rest is for its own compute and
transfer, and for routing's uneven shares."""


def served_rate(throughput: float, link_rate: float | None, bytes_per_sample: float) -> float:
    """Samples/s a peer serves on a stage moving `bytes_per_sample`: its compute rate, capped by its
    measured link (None: not measured, no cap)."""
    if link_rate is None or bytes_per_sample <= 0:
        return throughput
    return min(throughput, link_rate / bytes_per_sample)


def outstanding_cap(
    stage_rates: Sequence[float],
    stage_peers: Sequence[int],
    microbatch_size: int,
    call_timeout_s: float = CALL_TIMEOUT_S,
) -> int | None:
    """Most microbatches outstanding at once for stages serving `stage_rates` samples/s in all with
    `stage_peers` peers each; None (no bound) while a stage has no rate. Never below one per stage,
    so every stage can have work."""
    if not stage_rates or microbatch_size <= 0 or min(stage_rates) <= 0:
        return None
    bottleneck = min(stage_rates)
    # One microbatch's trip through idle stages, each at a peer of its stage's mean rate.
    trip_s = sum(microbatch_size * peers / rate for rate, peers in zip(stage_rates, stage_peers, strict=True))
    in_pipeline = bottleneck * trip_s / microbatch_size
    queued = bottleneck * call_timeout_s * QUEUE_SHARE_OF_TIMEOUT / microbatch_size
    return max(len(stage_rates), math.floor(in_pipeline + queued))
