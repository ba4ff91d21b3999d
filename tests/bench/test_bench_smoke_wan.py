"""The WAN benchmark runs end to end at its smallest size: a swarm on namespace hosts with capped
links trains, and the step's bytes (the run's metric and the hosts' interface counters) are written.

Figures are timings on a shared machine and are never asserted. Like the multi-host tests, it
skips with the reason where namespaces cannot be made (fails under SWARMHUB_TEST_REQUIRE_ALL=1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.smoke_runner import run_smoke
from tests.multihost.netns import available
from tests.required import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_wan_smoke_writes_a_cell(tmp_path: Path) -> None:
    reason = available()
    if reason is not None:
        unavailable(f"cannot make separate hosts out of network namespaces: {reason}")
    run_smoke("bench.wan", tmp_path, timeout_s=280)
    [path] = tmp_path.glob("wan_smoke_*.json")
    assert path.with_suffix(".png").is_file()
    payload = json.loads(path.read_text())
    assert payload["config"]["smoke"] is True
    [row, details] = payload["rows"]
    assert (row["link"], row["codec"]) == ("50 Mbit/s", "int8")
    assert row["failed_cells"] == 0, details
    assert row["samples_per_s"] > 0 and row["samples_lost"] == 0
    # Both peers trained a stage across the capped links: their hosts' interfaces carried it.
    assert row["wire_bytes_per_step"] > 0 and row["interface_bytes_per_step"] > 0
    [cell] = details["cells"]
    assert sorted(cell["peer_stages"].values()) == [0, 1], cell
    assert all(sent > 0 for sent in cell["interface_bytes_per_step_by_host"]), cell
