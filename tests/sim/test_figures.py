"""`python -m sim.figures`: a figure's quick runs write its JSON and plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.figures import PATTERNS, main


@pytest.mark.slow
def test_the_scale_figure_runs_each_size_with_both_averaging_patterns(tmp_path: Path) -> None:
    assert main(["scale", "--quick", "--out", str(tmp_path)]) == 0
    (written,) = tmp_path.glob("sim-scale_*.json")
    assert written.with_suffix(".png").exists()
    rows = json.loads(written.read_text())["rows"]
    assert {(r["peers"], r["averaging"]) for r in rows} == {(p, a) for p in (64, 256) for a in PATTERNS}
    assert all(r["samples_per_s"] > 0 for r in rows)
