"""The coordinator-load and transport benchmarks run end to end at smoke sizes (so they don't rot).

Checks only that each writes its JSON and plot with the expected shape; the figures themselves are
timings on a shared machine and are never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


POSTGRES_URL = os.environ.get(
    "SWARMHUB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _postgres_reachable() -> bool:
    import sqlalchemy as sa

    engine = sa.create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
    try:
        with engine.connect():
            return True
    except sa.exc.OperationalError:
        return False
    finally:
        engine.dispose()


def _run(module: str, out: Path, *extra: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", module, "--smoke", "--out", str(out), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (json_path,) = out.glob("*.json")
    assert json_path.with_suffix(".png").exists()
    payload = json.loads(json_path.read_text())
    assert {"benchmark", "config", "environment", "rows"} <= payload.keys()
    return payload


def test_coordinator_load_smoke(tmp_path: Path) -> None:
    database = "postgres" if _postgres_reachable() else "sqlite"
    payload = _run(
        "bench.coordinator_load", tmp_path, "--database", database, "--postgres-server", POSTGRES_URL
    )
    rows = {(r["metric"], r["phase"].split(" ")[0]): r for r in payload["rows"]}
    for metric in ("control_round_trip", "GET /api/runs/{id}", "GET /api/runs/{id}/peers", "heartbeats"):
        assert (metric, "idle") in rows and (metric, "loaded") in rows
    assert rows[("control_round_trip", "loaded")]["n"] > 0
    assert rows[("heartbeats", "loaded")]["n"] > 0
    assert {"register_peer", "open_channel", "client_heartbeat_lag", "stage_decision"} <= {
        r["metric"] for r in payload["rows"]
    }
    assert rows[("open_channel", "setup")]["failures"] == 0
    assert payload["config"]["coordinator_alive"] is True


def test_transport_smoke(tmp_path: Path) -> None:
    payload = _run("bench.transport", tmp_path)
    hops = [r for r in payload["rows"] if r["part"] == "hop"]
    assert {r["codec"] for r in hops} == {"none", "int8"}
    for row in hops:
        assert {
            "call_comm_p50_ms",
            "hop_ms",
            "stage0_compute_ms",
            "hop_over_stage0",
            "frame_bytes",
        } <= row.keys()
        assert row["hop_ms"] > 0 and row["stage0_compute_ms"] > 0
    throughput = [r for r in payload["rows"] if r["part"] == "throughput"]
    assert throughput and all(r["mb_per_s"] > 0 for r in throughput)
