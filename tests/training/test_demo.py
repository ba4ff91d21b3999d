"""`swarmhub demo --json`: the headless run users and scripts rely on prints one JSON object last."""

from __future__ import annotations

import json
import subprocess

import pytest

from launch.local_swarm import console_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_demo_prints_one_json_summary_last() -> None:
    result = subprocess.run(
        [console_script("swarmhub"), "demo", "--peers", "2", "--stages", "2", "--steps", "6", "--json"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("loss_first", "loss_last", "steps", "samples_per_s", "peers", "failures", "rebalances"):
        assert key in summary, key
    assert summary["steps"] == 6
    assert summary["peers"] == 2
    assert summary["loss_last"] < summary["loss_first"]
    assert summary["samples_per_s"] > 0
    assert summary["failures"] == 0
    assert summary["wire_bytes_per_step"] > 0
