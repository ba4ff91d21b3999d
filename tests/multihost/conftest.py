"""Fixtures for the multi-host tests: a LAN of network namespaces, torn down in every outcome."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.multihost.netns import Lan, available, lan
from tests.required import unavailable


@pytest.fixture
def network() -> Iterator[Lan]:
    """An empty LAN (bridge only); tests add the hosts they need."""
    reason = available()
    if reason is not None:
        unavailable(f"cannot make separate hosts out of network namespaces: {reason}")
    with lan() as made:
        yield made
