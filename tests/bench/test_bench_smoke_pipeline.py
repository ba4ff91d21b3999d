"""The baselines, pipeline, compression and square-cube benchmarks run end to end at smoke sizes.

Each is run as a user runs it (`python -m bench.<name> --smoke --out DIR`); the test checks that it
wrote its JSON and plot with the expected keys. Figures are timings on a shared machine and are
never asserted, except the GPipe-equals-one-process loss check, which is exact arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.baselines import TrainConfig, torch_pipeline
from bench.compression import averaging_bytes_per_step
from tests.bench.smoke_runner import run_smoke

pytestmark = pytest.mark.slow


def _run(name: str, out: Path) -> dict:
    run_smoke(f"bench.{name}", out, timeout_s=240)
    jsons = list(out.glob(f"{name}_*.json"))
    assert len(jsons) == 1, f"expected one {name} JSON in {out}, found {jsons}"
    assert jsons[0].with_suffix(".png").is_file(), "the plot was not written"
    payload = json.loads(jsons[0].read_text())
    assert payload["benchmark"] == name
    assert payload["config"]["smoke"] is True
    assert "torch" in payload["environment"]
    return payload


def test_baselines_smoke(tmp_path: Path) -> None:
    payload = _run("baselines", tmp_path)
    rows = {r["system"].split(" (")[0]: r for r in payload["rows"]}
    assert {"one process", "GPipe, torch.distributed.pipelining", "loss_check"} <= rows.keys()
    assert rows["one process"]["samples_per_s"] > 0
    assert rows["loss_check"]["equal"] is True


def test_pipeline_smoke(tmp_path: Path) -> None:
    payload = _run("pipeline", tmp_path)
    systems = [r["system"] for r in payload["rows"]]
    assert any(s.startswith("SWARM") for s in systems)
    assert any(s.startswith("GPipe") for s in systems)
    swarm = next(r for r in payload["rows"] if r["system"].startswith("SWARM"))
    assert swarm["samples_per_s"] > 0
    assert {"vs_one_process", "vs_gpipe", "ideal_samples_per_s", "fraction_of_ideal"} <= swarm.keys()
    loss_check = next(r for r in payload["rows"] if r["system"] == "loss_check")
    assert loss_check["equal"] is True


def test_compression_smoke(tmp_path: Path) -> None:
    payload = _run("compression", tmp_path)
    rows = {r["codec"]: r for r in payload["rows"]}
    assert {"none", "float16", "int8"} <= rows.keys()
    for codec in ("none", "float16", "int8"):
        assert {"wire_bytes_per_step", "frame_bytes", "rel_l2_error", "bytes_per_element"} <= rows[
            codec
        ].keys()
    # Frame sizes are deterministic: 8-bit frames are smaller than 16-bit ones, smaller than 32-bit.
    assert rows["int8"]["frame_bytes"] < rows["float16"]["frame_bytes"] < rows["none"]["frame_bytes"]
    assert rows["none"]["rel_l2_error"] == 0.0
    # The smoke run has one peer per stage, so nothing to average; with two per stage push
    # frames are counted and shrink with the codec.
    assert all(rows[c]["averaging_bytes_per_step"] == 0 for c in ("none", "float16", "int8"))
    averaging = [averaging_bytes_per_step(TrainConfig(), c, peers=4) for c in ("int8", "float16", "none")]
    assert 0 < averaging[0] < averaging[1] < averaging[2]


def test_square_cube_smoke(tmp_path: Path) -> None:
    payload = _run("square_cube", tmp_path)
    rows = payload["rows"]
    assert [r["d_model"] for r in rows] == payload["config"]["sizes"]
    for row in rows:
        assert {
            "compute_ms",
            "comm_ms_float32",
            "comm_share_float32",
            "comm_ms_int8",
            "comm_share_int8",
        } <= row.keys()
        assert 0.0 < row["comm_share_float32"] < 1.0


def test_a_pipeline_restarted_from_its_checkpoint_goes_on_as_if_never_stopped(tmp_path: Path) -> None:
    """The fixed pipeline the churn benchmark restarts resumes its parameters, optimizer state and
    step count: one step, a restart, two more steps give the losses of three steps in one launch (the
    third loss depends on the optimizer's moments after the second step)."""
    cfg = TrainConfig(preset="tiny", num_stages=2, batch_size=8, microbatch_size=4, seq_len=32)
    straight = torch_pipeline(cfg, 3, 0, "1f1b")
    torch_pipeline(cfg, 1, 0, "1f1b", checkpoint_dir=str(tmp_path))
    resumed = torch_pipeline(cfg, 2, 0, "1f1b", checkpoint_dir=str(tmp_path), resume=True)
    assert resumed["losses"] == pytest.approx(straight["losses"][1:], rel=1e-6)
    assert resumed["losses"][0] != pytest.approx(straight["losses"][0], rel=1e-3)
