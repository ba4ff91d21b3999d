"""The coordinator refuses each run setting in the words the dashboard's form uses for it: the cases
of frontend/tests/run-settings-messages.json, which the form's own unit tests check too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CASES_PATH = Path(__file__).resolve().parents[2] / "frontend" / "tests" / "run-settings-messages.json"
CASES = json.loads(CASES_PATH.read_text())


def test_the_cases_preset_is_the_coordinators(client):
    presets = {p["name"]: p for p in client.get("/api/presets").json()}
    assert presets[CASES["preset"]["name"]] == CASES["preset"]


@pytest.mark.parametrize("case", CASES["cases"], ids=lambda case: f"{case['field']}:{case['message'][:40]}")
def test_a_refusal_reads_as_the_form_says_it(client, owner_headers, case):
    body = {"name": "refused", "model_preset": CASES["preset"]["name"]} | case["body"]
    response = client.post("/api/runs", json=body, headers=owner_headers)
    assert response.status_code == 422, response.text
    assert [(e["loc"], e["msg"]) for e in response.json()["detail"]] == [
        (["body", case["field"]], case["message"])
    ]
