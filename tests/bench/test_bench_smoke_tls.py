"""The TLS-cost benchmark runs end to end at smoke sizes: both transports measured, ratios written.

Figures are timings on a shared machine and are never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.smoke_runner import run_smoke

pytestmark = pytest.mark.slow


def test_tls_cost_smoke_writes_paired_rows(tmp_path: Path) -> None:
    run_smoke("bench.tls_cost", tmp_path, timeout_s=240)
    [path] = tmp_path.glob("tls_cost_smoke_*.json")
    assert path.with_suffix(".png").is_file()
    payload = json.loads(path.read_text())
    assert payload["benchmark"] == "tls_cost_smoke" and payload["config"]["smoke"] is True
    parts = sorted(row["part"] for row in payload["rows"])
    assert parts == ["hop", "hop", "throughput"]
    assert all(row["tls_over_plain"] > 0 and row["tls_p50_ms"] > 0 for row in payload["rows"])
