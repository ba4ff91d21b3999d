"""The coordinator-load and transport benchmarks run end to end at smoke sizes (so they don't rot).

Checks only that each writes its JSON and plot with the expected shape; the figures themselves are
timings on a shared machine and are never asserted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.bench.smoke_runner import run_smoke
from tests.required import require_all

pytestmark = pytest.mark.slow

# The coordinator's load is measured on PostgreSQL, as deployed; SQLite only where no server is
# named and not every test is required. The database is in the test id, so a report says which.
POSTGRES_URL = os.environ.get("SWARMHUB_TEST_POSTGRES_URL")
LOAD_DATABASE = "postgres" if POSTGRES_URL else "sqlite"


def _run(module: str, out: Path, *extra: str) -> dict:
    run_smoke(module, out, *extra, timeout_s=120)
    (json_path,) = out.glob("*.json")
    assert json_path.with_suffix(".png").exists()
    payload = json.loads(json_path.read_text())
    assert {"benchmark", "config", "environment", "rows"} <= payload.keys()
    return payload


@pytest.mark.parametrize("database", [LOAD_DATABASE])
def test_coordinator_load_smoke(tmp_path: Path, database: str) -> None:
    if database == "sqlite" and require_all():
        pytest.fail("SWARMHUB_TEST_POSTGRES_URL is not set: the load smoke test must run on PostgreSQL")
    server = ("--postgres-server", POSTGRES_URL) if POSTGRES_URL else ()
    payload = _run("bench.coordinator_load", tmp_path, "--database", database, *server)
    assert payload["config"]["database"] == database
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
