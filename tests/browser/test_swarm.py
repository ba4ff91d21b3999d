"""A real swarm on the dashboard: `swarmhub-peer join` processes join a one-stage tiny run; the
run page shows them in the stage column and charts the loss of committed steps; an admin kicks
one; a peer that dies without a goodbye is marked lost. Nothing here fakes a peer."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from browser_helpers import (
    ADMIN,
    HEARTBEAT_TIMEOUT_S,
    OWNER,
    Peers,
    screenshot,
    sign_in,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.browser

PEER_START_S = 120
"""Generous: a peer imports torch, benchmarks itself and loads its stage before it is active."""


@dataclass
class Swarm:
    run_id: int
    join_command: str
    peers: Peers


@pytest.fixture(scope="module")
def swarm(coordinator, browser, tmp_path_factory) -> Iterator[Swarm]:
    """A one-stage tiny run whose join command comes from the run page, with two real peers."""
    with coordinator.api(*OWNER) as owner:
        run = owner.post(
            "/api/runs",
            json={
                "name": "browser swarm",
                "model_preset": "tiny",
                "num_stages": 1,
                "target_batch_size": 8,
                "microbatch_size": 4,
                "seq_len": 32,
                "learning_rate": 0.003,
                "warmup_steps": 2,
                "max_steps": 100000,
            },
        )
        assert run.status_code == 201, run.text
        run_id = run.json()["id"]

    context = browser.new_context(base_url=coordinator.url)
    page = context.new_page()
    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{run_id}")
    page.get_by_role("button", name="Issue join token").click()
    join_command = page.get_by_test_id("join-command").inner_text()
    context.close()

    peers = Peers(workdir=tmp_path_factory.mktemp("peers"))
    peers.join(join_command, "peer-a")
    peers.join(join_command, "peer-b")
    try:
        yield Swarm(run_id=run_id, join_command=join_command, peers=peers)
    finally:
        for peer in peers.started:
            stop_process(peer.process)


def _diagnostics(coordinator, swarm: Swarm) -> str:
    return f"--- coordinator ---\n{coordinator.log_tail()}\n{swarm.peers.logs()}"


def test_peers_join_and_the_loss_of_a_step_is_charted(page, coordinator, swarm: Swarm) -> None:
    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{swarm.run_id}")
    stage = page.get_by_test_id("stage-0")
    wait_until(
        lambda: stage.locator('[data-testid=peer][data-state="active"]').count() == 2,
        PEER_START_S,
        "both peers active in stage 0 on the run page",
        lambda: _diagnostics(coordinator, swarm),
        swarm.peers.all_exited,
    )
    card = stage.locator("[data-testid=peer]", has_text="peer-a")
    assert "cpu" in card.inner_text()
    assert re.search(r"\d+(\.\d)? samples/s", card.inner_text())

    chart = page.get_by_test_id("loss-chart")
    wait_until(
        lambda: int(chart.get_attribute("data-points") or 0) >= 2,
        PEER_START_S,
        "two committed steps on the loss chart",
        lambda: _diagnostics(coordinator, swarm),
        swarm.peers.all_exited,
    )
    loss = float(page.get_by_test_id("latest-loss").inner_text())
    assert 0 < loss < 10, loss
    assert int(page.get_by_test_id("current-step").inner_text().split("/")[0]) >= 2
    assert page.get_by_test_id("eta").inner_text() not in ("", "done")
    assert chart.locator("canvas").count() >= 1
    assert int(page.get_by_test_id("rate-chart").get_attribute("data-points") or 0) >= 2
    screenshot(page, "run-page-training")


def test_admin_kicks_a_peer(page, coordinator, swarm: Swarm) -> None:
    sign_in(page, *ADMIN)
    page.goto("/#/admin")
    row = page.locator('[data-testid=admin-peer][data-state="active"]', has_text="peer-a")
    wait_until(
        lambda: row.count() == 1,
        PEER_START_S,
        "peer-a active on the admin page",
        lambda: _diagnostics(coordinator, swarm),
        swarm.peers.all_exited,
    )
    assert "ago" in row.inner_text(), "last heartbeat is shown"
    row.get_by_role("button", name="Kick").click()
    page.get_by_role("status").filter(has_text="Kick sent to peer peer-a").wait_for()
    page.get_by_label("show departed peers").check()
    page.locator('[data-testid=admin-peer][data-state="kicked"]', has_text="peer-a").wait_for()
    screenshot(page, "admin-after-kick")

    kicked = next(p for p in swarm.peers.started if p.name == "peer-a")
    wait_until(
        lambda: kicked.process.poll() is not None,
        30,
        "the kicked peer process to exit",
        lambda: _diagnostics(coordinator, swarm),
        swarm.peers.all_exited,
    )

    page.goto(f"/#/runs/{swarm.run_id}")
    page.get_by_label("show departed peers").check()
    page.get_by_test_id("stage-0").locator(
        '[data-testid=peer][data-state="kicked"]', has_text="peer-a"
    ).wait_for()
    screenshot(page, "run-page-after-kick")


def test_a_peer_that_dies_is_marked_lost(page, coordinator, swarm: Swarm) -> None:
    survivor = next(p for p in swarm.peers.started if p.name == "peer-b")
    assert survivor.process.poll() is None, swarm.peers.logs()
    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{swarm.run_id}")
    stage = page.get_by_test_id("stage-0")
    stage.locator('[data-testid=peer][data-state="active"]', has_text="peer-b").wait_for()
    survivor.process.send_signal(signal.SIGKILL)  # no goodbye: the heartbeats just stop
    survivor.process.wait(10)
    wait_until(
        lambda: stage.locator('[data-testid=peer][data-state="lost"]', has_text="peer-b").count() == 1,
        HEARTBEAT_TIMEOUT_S + 30,
        "peer-b marked lost on the run page",
        lambda: _diagnostics(coordinator, swarm),
    )
    screenshot(page, "run-page-peer-lost")
