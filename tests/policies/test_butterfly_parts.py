"""Each member's weight in a butterfly round's parts (`server/policies/butterfly_parts.py`)."""

from __future__ import annotations

import pytest

from peer.butterfly import part_bounds
from server.policies.butterfly_parts import MOST_PART_WEIGHT, part_weights
from swarmhub.wire import PeerEndpoint, StepBarrier

DATACENTER = 125e6
BROADBAND = 12.5e6


@pytest.mark.parametrize(
    ("rates", "weights"),
    [
        pytest.param([], None, id="no members"),
        pytest.param([None, None, None], None, id="nothing measured: equal parts"),
        pytest.param([DATACENTER] * 3, None, id="equal links: equal parts"),
        pytest.param([DATACENTER, BROADBAND], [125_000, 12_500], id="in proportion to the links"),
        pytest.param([DATACENTER, None, BROADBAND], [125_000, 68_750, 12_500], id="unmeasured at the median"),
        pytest.param([DATACENTER, None], None, id="the one measured is the median: equal"),
        pytest.param([BROADBAND / 2**3, BROADBAND], [1_562, 12_500], id="held up three times: an eighth"),
        pytest.param([1.0, 2e3], [1, 2], id="never below one"),
        pytest.param([1e18, 1.0], [MOST_PART_WEIGHT, 1], id="never above the most"),
    ],
)
def test_part_weights(rates: list[float | None], weights: list[int] | None) -> None:
    assert part_weights(rates) == weights


def test_a_broadband_member_among_datacenter_ones_owns_a_tenth_of_their_part() -> None:
    weights = part_weights([DATACENTER] * 21 + [BROADBAND] * 9)
    assert weights is not None
    sizes = [end - start for start, end in part_bounds(1_000_000, weights)]
    assert sizes[0] == pytest.approx(10 * sizes[-1], rel=1e-3)
    assert sum(sizes) == 1_000_000


def _endpoint(peer_id: int) -> PeerEndpoint:
    return PeerEndpoint(peer_id=peer_id, address=f"127.0.0.1:{9000 + peer_id}", stage=0)


@pytest.mark.parametrize(
    ("pattern", "weights", "error"),
    [
        pytest.param("butterfly", [1, 2], "2 part weights for 3 members", id="a weight short"),
        pytest.param("all_to_all", [1, 2, 3], "only a butterfly", id="weights without parts"),
        pytest.param("butterfly", [1, 0, 3], "greater than or equal to 1", id="a zero weight"),
    ],
)
def test_a_barrier_weighs_each_member_of_a_butterfly_once(
    pattern: str, weights: list[int], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        StepBarrier(
            step=0,
            attempt=0,
            stage=0,
            group=[_endpoint(p) for p in (1, 2, 3)],
            pattern=pattern,  # type: ignore[arg-type]
            part_weights=weights,
        )
