"""A contribution's gradient norm against the samples it counts (`out_of_proportion`)."""

from __future__ import annotations

import math

import pytest

from server.policies.averaging import PROPORTION_LIMIT, out_of_proportion, per_sample_norm


def grad(samples: int, norm: float) -> tuple[float, int]:
    """(squared norm, samples) of a contribution with this norm."""
    return norm**2, samples


def test_per_sample_norm() -> None:
    assert per_sample_norm(16.0, 4) == 1.0
    assert per_sample_norm(0.0, 0) == 0.0
    assert math.isinf(per_sample_norm(1.0, 0))


@pytest.mark.parametrize(
    ("contributions", "history", "flagged"),
    [
        pytest.param(
            # Uncorrelated per-sample gradients: a sum's norm grows like sqrt(samples).
            {1: grad(8, math.sqrt(8)), 2: grad(64, math.sqrt(64)), 3: grad(8, math.sqrt(8))},
            [],
            {},
            id="honest-sqrt-growth",
        ),
        pytest.param(
            # Aligned per-sample gradients: a sum's norm grows like samples.
            {1: grad(8, 8.0), 2: grad(64, 64.0), 3: grad(64, 64.0)},
            [],
            {},
            id="honest-linear-growth",
        ),
        pytest.param(
            {1: grad(8, 8.0), 2: grad(64, 8.0), 3: grad(8, 8.0 * math.sqrt(8))},
            [],
            {},
            id="honest-mixed-counts",
        ),
        pytest.param(
            {1: grad(8, 8.0), 2: grad(8, 8.0), 3: grad(8, 8.0 * 50)},
            [],
            {3: 50.0},
            id="scaled-50x",
        ),
        pytest.param(
            {1: grad(8, 8.0), 2: grad(64, 64.0), 3: grad(8, 8.0 * 50), 4: grad(64, 64.0)},
            [],
            {3: 50.0},
            id="scaled-50x-among-mixed-counts",
        ),
        pytest.param(
            {1: grad(8, 8.0), 2: grad(8, 8.0), 3: grad(0, 1.0)},
            [],
            {3: math.inf},
            id="zero-samples",
        ),
        pytest.param({1: grad(0, 1.0)}, [], {1: math.inf}, id="zero-samples-alone"),
        pytest.param({1: grad(0, 0.0), 2: grad(8, 8.0), 3: grad(8, 8.0)}, [], {}, id="nothing-from-nothing"),
        pytest.param(
            # Two members: each is held against the other, or the stage's accepted rounds if larger.
            {1: grad(8, 8.0), 2: grad(8, 8.0 * 50)},
            [1.0, 1.0, 1.0],
            {2: 50.0},
            id="two-use-history",
        ),
        pytest.param(
            {1: grad(8, 8.0), 2: grad(8, 8.0)},
            [1.0, 1.0],
            {},
            id="two-honest-against-history",
        ),
        pytest.param(
            {1: grad(8, 8.0), 2: grad(8, 8.0 * 50)},
            [],
            {},
            id="two-without-history",
        ),
        pytest.param(
            # A spike the whole stage shares (seen in a real run: both members 150-200x the history
            # when the loss jumped) is nobody's fault.
            {1: grad(16, 16.0 * 150), 2: grad(48, 48.0 * 200)},
            [1.0, 1.0, 1.0],
            {},
            id="two-share-a-spike",
        ),
        pytest.param({1: grad(8, 8.0 * 200)}, [1.0, 1.0], {}, id="lone-member-not-judged"),
        pytest.param(
            # Seen in CI: a stage of two whose loss jumped, one member copying its stage again and
            # routed nothing. The one that did all 64 samples was 81-89x the history three steps
            # running and banned, honest; with an empty partner it is a lone member.
            {1: grad(64, 64.0 * 85), 2: grad(0, 0.0)},
            [1.0, 1.0, 1.0],
            {},
            id="two-one-empty-share-nothing",
        ),
        pytest.param(
            # An empty contribution does not make a median of three either (it was the median's
            # floor: 2 was 12x member 1): the other two are a stage of two, held against each other
            # or the history, whichever is larger.
            {1: grad(8, 8.0), 2: grad(8, 8.0 * 12), 3: grad(0, 0.0)},
            [2.0],
            {},
            id="empty-is-no-reference",
        ),
        pytest.param(
            # History is not consulted when three members can outvote a liar.
            {1: grad(8, 8.0), 2: grad(8, 8.0), 3: grad(8, 8.0)},
            [0.01],
            {},
            id="three-ignore-history",
        ),
        pytest.param(
            {1: grad(8, 8.0), 2: grad(8, 8.0), 3: grad(8, 8.0 / 50)},
            [],
            {},
            id="scaled-down-not-flagged",
        ),
        pytest.param(
            {1: grad(8, 8.0), 2: grad(8, 8.0 / 50)},
            [1.0],
            {},
            id="scaled-down-against-history",
        ),
        pytest.param(
            {1: grad(8, 8.0), 2: grad(8, 8.0), 3: grad(8, 8.0 * PROPORTION_LIMIT)},
            [],
            {},
            id="at-the-limit",
        ),
    ],
)
def test_out_of_proportion(
    contributions: dict[int, tuple[float, int]], history: list[float], flagged: dict[int, float]
) -> None:
    found = out_of_proportion(contributions, history)
    assert found.keys() == flagged.keys()
    for peer, times in flagged.items():
        assert found[peer] == pytest.approx(times)
