"""The recovery benchmark runs end to end at smoke size and writes its results (figures not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_recovery_smoke(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.recovery", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (json_path,) = tmp_path.glob("recovery_*.json")
    assert json_path.with_suffix(".png").exists()
    rows = json.loads(json_path.read_text())["rows"]
    assert [row["mode"] for row in rows] == ["killed", "frozen"]
    for row in rows:
        assert row["removed"] == 1
        assert row["first_step_after_s"] > 0
        assert row["timeline"]
