"""Which calls a peer still computes by how long they waited for its compute thread."""

from __future__ import annotations

import pytest

from peer.accept_window import ACCEPT_FRACTION, computes

TIMEOUT_S = 10.0


@pytest.mark.parametrize(
    ("accumulates", "waited_s", "timeout_s", "expected"),
    [
        (True, 0.0, TIMEOUT_S, True),
        (True, ACCEPT_FRACTION * TIMEOUT_S - 0.01, TIMEOUT_S, True),
        # A caller that retried elsewhere may have its samples counted there: not here as well.
        (True, ACCEPT_FRACTION * TIMEOUT_S, TIMEOUT_S, False),
        (True, TIMEOUT_S, TIMEOUT_S, False),
        # A forward keeps nothing it could count twice: computed until its caller gives up.
        (False, ACCEPT_FRACTION * TIMEOUT_S, TIMEOUT_S, True),
        (False, TIMEOUT_S - 0.01, TIMEOUT_S, True),
        (False, TIMEOUT_S, TIMEOUT_S, False),
        (False, 60 * TIMEOUT_S, TIMEOUT_S, False),
        # A caller that named no timeout sets no window.
        (True, 1e6, 0.0, True),
        (False, 1e6, 0.0, True),
    ],
)
def test_a_call_is_computed_only_within_its_window(
    accumulates: bool, waited_s: float, timeout_s: float, expected: bool
) -> None:
    assert computes(accumulates=accumulates, waited_s=waited_s, timeout_s=timeout_s) is expected
