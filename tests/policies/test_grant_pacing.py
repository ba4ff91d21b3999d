"""Grant pacing: the pipeline's knee plus what the slowest stage serves within a share of the
trainers' call timeout; peers' rates capped by their links."""

from __future__ import annotations

import pytest

from server.policies.grant_pacing import (
    CALL_TIMEOUT_S,
    QUEUE_SHARE_OF_TIMEOUT,
    outstanding_cap,
    served_rate,
)


@pytest.mark.parametrize(
    ("stage_rates", "stage_peers", "microbatch", "timeout_s", "expected"),
    [
        # Unmeasured: no bound.
        ([], [], 8, 60.0, None),
        ([10.0, 0.0], [1, 1], 8, 60.0, None),
        # One peer a stage: trip 8/100 + 8/400 = 0.1 s holds 1.25 in the pipeline, and the slowest
        # stage serves 375 in 30 s.
        ([100.0, 400.0], [1, 1], 8, 60.0, 376),
        ([400.0, 100.0, 250.0], [1, 1, 1], 8, 60.0, 376),
        ([100.0], [1], 8, 10.0, 63),
        # Never below one per stage.
        ([0.1, 0.1, 0.1, 0.1], [1, 1, 1, 1], 8, 60.0, 4),
        # 32 stages of 300 peers at 3 samples/s each (slow links): every peer busy holds 9,600, and
        # 900 samples/s for 30 s is 3,375 more; 10,000 trainers at two each would ask for 20,000.
        ([900.0] * 32, [300] * 32, 8, 60.0, 12_975),
        # A small swarm's trainers ask for a handful: the bound is far above that.
        ([60.0, 55.0], [2, 2], 4, 60.0, 416),
    ],
)
def test_cap_is_the_pipelines_knee_plus_what_the_slowest_stage_serves_in_the_queues_share(
    stage_rates: list[float], stage_peers: list[int], microbatch: int, timeout_s: float, expected: int | None
) -> None:
    assert outstanding_cap(stage_rates, stage_peers, microbatch, timeout_s) == expected


@pytest.mark.parametrize("rate", [0.5, 3.0, 77.0, 2800.0])
@pytest.mark.parametrize("microbatch", [1, 8, 32])
@pytest.mark.parametrize("peers", [1, 40])
def test_beyond_the_knee_the_last_queued_at_the_slowest_stage_starts_within_the_share(
    rate: float, microbatch: int, peers: int
) -> None:
    stage_rates = [rate, 10 * rate]
    cap = outstanding_cap(stage_rates, [peers, peers], microbatch)
    assert cap is not None
    knee = rate * sum(microbatch * peers / r for r in stage_rates) / microbatch
    if cap > 2:  # above the one-per-stage floor
        assert (cap - knee) * microbatch / rate <= CALL_TIMEOUT_S * QUEUE_SHARE_OF_TIMEOUT
        assert (cap + 1 - knee) * microbatch / rate > CALL_TIMEOUT_S * QUEUE_SHARE_OF_TIMEOUT


@pytest.mark.parametrize(
    ("throughput", "link_rate", "bytes_per_sample", "expected"),
    [
        (20.0, None, 1e7, 20.0),  # link not measured: its compute rate
        (20.0, 125e6, 1e7, 12.5),  # a data-centre link carries 12.5 samples/s of 10 MB
        (20.0, 12.5e6, 1e7, 1.25),  # broadband: a tenth of that
        (5.0, 125e6, 1e7, 5.0),  # compute-bound
        (20.0, 125e6, 0.0, 20.0),
    ],
)
def test_a_peer_serves_at_its_compute_rate_capped_by_its_link(
    throughput: float, link_rate: float | None, bytes_per_sample: float, expected: float
) -> None:
    assert served_rate(throughput, link_rate, bytes_per_sample) == pytest.approx(expected)
