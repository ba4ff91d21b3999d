"""The front-door benchmark runs end to end at smoke sizes against a real `swarmhub serve`: wrong
logins back off (429), oversized bodies are 413, non-finite JSON is 422, nothing is a 500 or a
dropped connection, and the real admin still signs in from another address afterwards.

Memory and latency figures are recorded, never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.smoke_runner import run_smoke

pytestmark = pytest.mark.slow


def test_front_door_smoke_refuses_every_attack_and_keeps_serving(tmp_path: Path) -> None:
    run_smoke("bench.front_door", tmp_path, timeout_s=240)
    [path] = tmp_path.glob("front_door_smoke_*.json")
    report = json.loads(path.read_text())
    phases = {row["phase"]: row for row in report["rows"]}
    logins, bodies, nan = phases["wrong logins"], phases["2 MiB bodies"], phases["NaN/Infinity bodies"]
    assert set(logins["statuses"]) <= {"401", "429"} and "429" in logins["statuses"]
    assert set(bodies["statuses"]) == {"413"}
    assert set(nan["statuses"]) == {"422"}
    assert all(row["healthz_failures"] == 0 for row in report["rows"])
    assert report["config"]["admin_login_after_attack"] == 200
