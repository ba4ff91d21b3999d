"""The contribution ledger on the dashboard: two participants (join tokens) each run a real peer on a
one-stage tiny run; the run page's leaderboard ranks them and shows each peer, and the link a peer
printed opens its participant's own page without signing in."""

from __future__ import annotations

import re

import pytest
from browser_helpers import OWNER, screenshot, sign_in, wait_until

pytestmark = pytest.mark.browser

PEER_START_S = 120
"""Generous: a peer imports torch, benchmarks itself and loads its stage before it trains."""
LINK = re.compile(r"what this peer contributes, live: (\S+)")


def test_the_leaderboard_ranks_participants_and_a_peer_links_to_its_own_page(
    page, browser, coordinator, owner_api, peers
) -> None:
    run = owner_api.post(
        "/api/runs",
        json={
            "name": "ledger on the dashboard",
            "model_preset": "tiny",
            "num_stages": 1,
            "target_batch_size": 8,
            "microbatch_size": 4,
            "seq_len": 32,
        },
    )
    assert run.status_code == 201, run.text
    run_id = run.json()["id"]
    for label in ("ann", "bob"):
        issued = owner_api.post(f"/api/runs/{run_id}/tokens", json={"label": label})
        assert issued.status_code == 201, issued.text
        peers.join(issued.json()["join_command"], f"{label}-peer")

    def diagnostics() -> str:
        return f"--- coordinator ---\n{coordinator.log_tail()}\n{peers.logs()}"

    def both_trained() -> bool:
        participants = owner_api.get(f"/api/runs/{run_id}/ledger").json()["participants"]
        return len(participants) == 2 and all(p["samples_trained"] > 0 for p in participants)

    wait_until(both_trained, PEER_START_S, "both participants credited samples", diagnostics)
    # Paused, the figures hold still while the page is read (a step already full may still commit).
    owner_api.post(f"/api/runs/{run_id}/pause").raise_for_status()

    def counted() -> int:
        return owner_api.get(f"/api/runs/{run_id}/ledger").json()["samples_counted"]

    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{run_id}")
    board = page.get_by_test_id("leaderboard")
    rows = board.get_by_test_id("leaderboard-row")
    wait_until(lambda: rows.count() == 2, 30, "two participants on the leaderboard", diagnostics)
    wait_until(
        lambda: f"{counted()} samples counted" in board.inner_text(),
        30,
        "the run's counted samples",
        diagnostics,
    )
    names = {rows.nth(i).locator("td").nth(1).inner_text().split(" (")[0] for i in range(2)}
    assert names == {"ann", "bob"}
    # The two shares of the samples the run counted add up to all of them.
    shares = [int(rows.nth(i).locator("td").last.inner_text().rstrip("%")) for i in range(2)]
    assert 99 <= sum(shares) <= 101, shares
    screenshot(page, "run-page-leaderboard")

    board.get_by_label("per peer").check()
    wait_until(lambda: "ann-peer" in board.inner_text(), 10, "the per-peer rows", diagnostics)
    assert rows.count() == 2
    board.get_by_role("button", name="Compute").click()
    assert board.get_by_role("button", name="Compute ▾").get_attribute("aria-pressed") == "true"

    # The participant's own page: from the line the peer printed, in a browser that never signed in.
    link = LINK.search(peers.started[0].log.read_text())
    assert link, peers.logs()
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        own = context.new_page()
        own.goto(link[1])
        own.get_by_test_id("contribution-run").wait_for()
        assert own.get_by_test_id("contribution-run").inner_text() == "ledger on the dashboard"
        assert re.fullmatch(r"#[12] of 2", own.get_by_test_id("contribution-rank").inner_text())
        assert int(own.get_by_test_id("contribution-peer-samples_trained").inner_text()) > 0
        assert "ann-peer" in own.get_by_test_id("contribution").inner_text()
        screenshot(own, "contribution-page")
    finally:
        context.close()
