"""Event messages write quantities in human units."""

from __future__ import annotations

import pytest

from swarmhub.units import format_bytes, per_stage


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (3_012_000, "3.0 MB"),
        (999_960, "1.0 MB"),
        (1_500_000_000, "1.5 GB"),
        (7 * 10**18, "7000.0 PB"),
    ],
)
def test_bytes_in_decimal_units(count, text):
    assert format_bytes(count) == text


def test_per_stage_counts_are_spelled_out_in_stage_order():
    assert per_stage({3: 8, 1: 32}) == "stage 1: 32, stage 3: 8"
    assert per_stage({}) == ""
