"""Honest health on the dashboard, with real peers: a two-stage run trains; stage 1's only peer is
killed, and within the heartbeat timeout the run page says the run is stalled and why, shows no
rate and no ETA, colours stage 1 red, and the runs list says "stalled"; a new peer on stage 1
brings it back to training and the banner goes. Paused, the live peers' heartbeats stay current
(they were written only when other figures changed, so a paused peer aged on the page). Nothing
here fakes a peer."""

from __future__ import annotations

import re
import signal

import pytest
from browser_helpers import HEARTBEAT_TIMEOUT_S, OWNER, screenshot, sign_in, wait_until

pytestmark = pytest.mark.browser

PEER_START_S = 180
"""Generous: a peer imports torch, benchmarks itself and loads its stage before it serves."""
SEEN_S = HEARTBEAT_TIMEOUT_S + 10
"""A killed peer's channel closes at once; the heartbeat timeout is the bound if it did not, plus
the coordinator's tick and the dashboard's frame."""


def test_the_stall_banner_appears_when_a_stage_loses_its_only_peer_and_clears_when_one_returns(
    page, coordinator, owner_api, peers
) -> None:
    created = owner_api.post(
        "/api/runs",
        json={
            "name": "health",
            "model_preset": "tiny",
            "num_stages": 2,
            "target_batch_size": 8,
            "microbatch_size": 4,
            "seq_len": 32,
            "max_steps": 100000,
        },
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    token = owner_api.post(f"/api/runs/{run_id}/tokens", json={"label": "health"})
    assert token.status_code == 201, token.text
    join = token.json()["join_command"]
    peers.join(join, "peer-a", "--stage", "0")
    stage_one = peers.join(join, "peer-b", "--stage", "1")

    def diagnostics() -> str:
        return f"--- coordinator ---\n{coordinator.log_tail()}\n{peers.logs()}"

    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{run_id}")
    badge = page.get_by_test_id("run-health")
    banner = page.get_by_test_id("health-banner")
    wait_until(
        lambda: (
            badge.get_attribute("data-state") == "training"
            and page.get_by_test_id("current-step").inner_text()[0] != "0"
        ),
        PEER_START_S,
        "the run training with a committed step",
        diagnostics,
        peers.all_exited,
    )
    assert banner.count() == 0
    wait_until(
        lambda: page.get_by_test_id("samples-per-s").inner_text() != "—",
        30,
        "a rate shown while training",
        diagnostics,
    )
    screenshot(page, "run-health-training")

    stage_one.process.send_signal(signal.SIGKILL)  # no goodbye
    stage_one.process.wait(10)
    wait_until(
        lambda: banner.count() == 1 and banner.get_attribute("data-state") == "stalled",
        SEEN_S,
        "the stall banner",
        diagnostics,
    )
    assert "stage 1 has no live peer since" in banner.inner_text()
    assert badge.get_attribute("data-state") == "stalled"
    assert page.get_by_test_id("samples-per-s").inner_text() == "—"
    assert page.get_by_test_id("eta").inner_text() == "—"
    dot = page.get_by_test_id("stage-1").get_by_test_id("stage-health")
    assert dot.get_attribute("data-color") == "red"
    assert (
        page.get_by_test_id("stage-0").get_by_test_id("stage-health").get_attribute("data-color") == "amber"
    )
    screenshot(page, "run-health-stalled")

    page.goto("/#/runs")
    row = page.locator(f'[data-testid=run-row][data-run-id="{run_id}"]')
    assert row.get_by_test_id("run-health").get_attribute("data-state") == "stalled"
    screenshot(page, "runs-list-stalled")

    page.goto(f"/#/runs/{run_id}")
    peers.join(join, "peer-c", "--stage", "1")
    wait_until(
        lambda: banner.count() == 0 and badge.get_attribute("data-state") == "training",
        PEER_START_S,
        "the run training again, banner gone",
        diagnostics,
    )
    assert dot.get_attribute("data-color") == "amber"  # one live peer again
    events = owner_api.get(f"/api/runs/{run_id}/events", params={"limit": 1000}).json()
    kinds = [e["kind"] for e in events]
    assert "run_stalled" in kinds and "run_recovered" in kinds
    assert kinds.index("run_stalled") < kinds.index("run_recovered")
    screenshot(page, "run-health-recovered")

    # Paused: no rate, no ETA, and the live peers' heartbeats stay as fresh as they are.
    assert owner_api.post(f"/api/runs/{run_id}/pause").status_code == 200
    wait_until(
        lambda: banner.count() == 1 and banner.get_attribute("data-state") == "paused",
        SEEN_S,
        "the paused banner",
        diagnostics,
    )
    assert page.get_by_test_id("samples-per-s").inner_text() == "—"
    assert page.get_by_test_id("eta").inner_text() == "—"
    page.wait_for_timeout(2 * HEARTBEAT_TIMEOUT_S * 1000)  # long enough for a stale time to show
    live = page.locator('[data-testid=peer][data-state="active"]')
    assert live.count() == 2
    for index in range(live.count()):
        shown = live.nth(index).get_by_test_id("peer-heartbeat").inner_text()
        age = re.fullmatch(r"heartbeat (\d+)s ago", shown)
        assert age is not None and int(age.group(1)) <= HEARTBEAT_TIMEOUT_S, shown
    screenshot(page, "run-health-paused")
