"""The TLS-cost benchmark runs end to end at smoke sizes: both transports measured, ratios written.

Figures are timings on a shared machine and are never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_tls_cost_smoke_writes_paired_rows(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.tls_cost", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    [path] = tmp_path.glob("tls_cost_smoke_*.json")
    assert path.with_suffix(".png").is_file()
    payload = json.loads(path.read_text())
    assert payload["benchmark"] == "tls_cost_smoke" and payload["config"]["smoke"] is True
    parts = sorted(row["part"] for row in payload["rows"])
    assert parts == ["hop", "hop", "throughput"]
    assert all(row["tls_over_plain"] > 0 and row["tls_p50_ms"] > 0 for row in payload["rows"])
