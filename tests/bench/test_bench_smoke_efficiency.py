"""The efficiency benchmark runs end to end at smoke size and writes its results (figures not asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.smoke_runner import run_smoke

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_efficiency_smoke(tmp_path: Path) -> None:
    run_smoke("bench.efficiency", tmp_path, timeout_s=880)
    (json_path,) = tmp_path.glob("efficiency_*.json")
    assert json_path.with_suffix(".png").exists()
    payload = json.loads(json_path.read_text())
    assert payload["config"]["smoke"] is True
    rows = {row["system"]: row for row in payload["rows"]}
    assert {"one process (2 threads)", "torch 1F1B (2 ranks x 1 thread, gloo)"} <= rows.keys()
    assert "vs_1f1b" in rows["SwarmHub 2 peers x 1 thread"]
    swarm = [row for row in payload["rows"] if row["system"].startswith("SwarmHub")]
    # Compute-bound, a mixed-speed swarm that rebalances, the tail-heavy preset and churn: each kind of
    # emulated run once (twins that differ by rebalancing off or by speeds alone run the same code).
    assert len(swarm) == 4
    for row in swarm:
        assert row["samples_per_s"] > 0
        assert row["ideal_samples_per_s"] > 0
        assert {"fraction_of_ideal", "moves", "samples_lost_to_moves", "step_time_split_s"} <= row.keys()
        busiest = row["busiest_stage_busy"]
        if "churn" not in row["system"]:  # a churn window may hold no step whose peers reported
            least, mean, most = (busiest[f"busiest_stage_{k}busy_share"] for k in ("least_", "", "most_"))
            assert 0 <= least <= mean <= most <= 1, busiest
    churn = next(row for row in swarm if "churn" in row["system"])
    assert churn["kills"] >= 1
    assert {"fixed_pipeline_samples_per_s", "vs_fixed_pipeline"} <= churn.keys()
    restart = churn["fixed_pipeline_restart"]
    assert restart["restart_s"] == churn["fixed_pipeline_restart_s"]
    assert restart["launch_to_loaded_s"] > 0 and restart["processes"] == 2
