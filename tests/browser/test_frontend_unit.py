"""Runs the dashboard's TypeScript unit tests (`npm test` in frontend/: bounded chart buffers,
reconnect backoff, 422-to-field mapping, form checks) with Node's built-in test runner."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.required import unavailable

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"


def test_frontend_unit_tests_pass() -> None:
    if shutil.which("npm") is None or not (FRONTEND / "node_modules" / ".bin" / "tsc").exists():
        unavailable("needs npm and frontend/node_modules (`make frontend`)")
    result = subprocess.run(
        ["npm", "test", "--silent"], cwd=FRONTEND, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
