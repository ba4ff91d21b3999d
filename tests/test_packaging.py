"""Each side installs and imports without the other's dependencies."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_without(blocked: list[str], code: str) -> subprocess.CompletedProcess[str]:
    # A None entry in sys.modules makes `import name` raise ImportError, as if it were not installed.
    prelude = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, cwd=ROOT)


def test_coordinator_imports_and_builds_its_app_without_torch() -> None:
    result = _run_without(
        ["torch", "bitsandbytes", "safetensors.torch", "numpy"],
        "from server.app import create_app\nprint(sorted(create_app().openapi()['paths']))",
    )
    assert result.returncode == 0, result.stderr
    assert "/api/peers/register" in result.stdout and "/api/runs/{run_id}/checkpoints" in result.stdout


def test_peer_imports_without_the_server_stack() -> None:
    result = _run_without(
        ["fastapi", "sqlalchemy", "alembic", "uvicorn", "argon2", "prometheus_client", "psycopg"],
        "import peer.cli, peer.runtime\nprint('ok')",
    )
    assert result.returncode == 0, result.stderr


def test_extras_split_the_dependencies_and_pin_torch() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert "torch==2.13.0" in extras["peer"]
    assert not any(
        dep.startswith(("torch", "bitsandbytes")) for dep in extras["server"] + project["dependencies"]
    )
    assert not any(
        dep.startswith(("fastapi", "sqlalchemy")) for dep in extras["peer"] + project["dependencies"]
    )
    assert project["scripts"] == {"swarmhub": "launch.cli:main", "swarmhub-peer": "peer.cli:main"}
