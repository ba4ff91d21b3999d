"""The GPU-path benchmark runs at smoke sizes where torch sees no GPU: the cuda half is skipped, the
CPU half of the codec and stage parts is measured and written (the swarm part is left to the
pipeline smoke test, which starts the same LocalSwarm).

Figures are timings on a shared machine and are never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.bench.smoke_runner import run_smoke

pytestmark = pytest.mark.slow


def test_gpu_path_smoke_writes_codec_and_stage_rows(tmp_path: Path) -> None:
    run_smoke("bench.gpu_path", tmp_path, "--parts", "codec", "stage", timeout_s=180)
    [path] = tmp_path.glob("gpu_path_*.json")
    payload = json.loads(path.read_text())
    assert payload["benchmark"] == "gpu_path" and payload["config"]["smoke"] is True
    parts = {row["part"] for row in payload["rows"]}
    assert parts == {"codec", "stage", "startup"}
    devices = {row["device"] for row in payload["rows"] if row["part"] == "stage"}
    assert devices == ({"cuda", "cpu"} if torch.cuda.is_available() else {"cpu"})
    int8 = [r for r in payload["rows"] if r["part"] == "codec" and r["what"] == "codec int8"]
    assert int8 and all(0 < r["rel_l2_error"] < 0.05 for r in int8)
