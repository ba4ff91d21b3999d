"""A benchmark's `--smoke` mode as the smoke tests run it: in a session of its own, so one that
overruns is stopped together with the coordinator and peers it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_smoke(module: str, out: Path, *extra: str, timeout_s: float) -> None:
    """Run `python -m <module> --smoke --out <out> <extra>`; fail the test, with the tail of its output,
    unless it exits 0 within `timeout_s`."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--smoke", "--out", str(out), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{module} --smoke ran past {timeout_s:.0f} s:\n{stdout[-3000:]}\n{stderr[-12000:]}")
    assert process.returncode == 0, f"{module} --smoke failed:\n{stdout[-3000:]}\n{stderr[-12000:]}"
