"""The recovery benchmark runs end to end at smoke size and writes its results (figures not asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.smoke_runner import run_smoke

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_recovery_smoke(tmp_path: Path) -> None:
    run_smoke("bench.recovery", tmp_path, timeout_s=280)
    (json_path,) = tmp_path.glob("recovery_*.json")
    assert json_path.with_suffix(".png").exists()
    rows = json.loads(json_path.read_text())["rows"]
    assert [row["mode"] for row in rows] == ["killed", "frozen"]
    for row in rows:
        assert row["removed"] == 1
        assert row["first_step_after_s"] > 0
        assert row["timeline"]
