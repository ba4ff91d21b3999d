"""A real swarm on the dashboard: `swarmhub-peer join` processes join a one-stage tiny run; the
run page shows them in the stage column and charts the loss of committed steps; checkpoints (every
2 steps on this coordinator) are listed and download as a model zip; the runs list shows the loss
and peers; an admin kicks one; a peer that dies without a goodbye is marked lost. Nothing here
fakes a peer."""

from __future__ import annotations

import io
import re
import signal
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from browser_helpers import (
    ADMIN,
    CHECKPOINT_EVERY_STEPS,
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
    # Every committed step records what its spot checks cost (zero where none fell on it).
    check_chart = page.get_by_test_id("spot-check-bytes-chart")
    wait_until(
        lambda: int(check_chart.get_attribute("data-points") or 0) >= 2,
        PEER_START_S,
        "the spot-check costs of two steps charted",
        lambda: _diagnostics(coordinator, swarm),
        swarm.peers.all_exited,
    )
    assert re.fullmatch(
        r"[\d.]+ (B|KiB|MiB|GiB)( \+[\d.]+% of pipeline)?",
        page.get_by_test_id("spot-check-bytes").inner_text(),
    )
    screenshot(page, "run-page-training")


def test_checkpoints_are_listed_downloaded_and_requested(page, coordinator, swarm: Swarm) -> None:
    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{swarm.run_id}")
    panel = page.get_by_test_id("checkpoints")
    rows = panel.locator("[data-testid=checkpoint]")
    wait_until(
        lambda: rows.count() >= 1,
        PEER_START_S,
        f"a complete checkpoint (every {CHECKPOINT_EVERY_STEPS} steps) in the Checkpoints panel",
        lambda: _diagnostics(coordinator, swarm),
        swarm.peers.all_exited,
    )
    newest = rows.first  # newest first
    assert re.search(r"\d+(\.\d+)? (KiB|MiB)", newest.inner_text()), newest.inner_text()

    # The link downloads the whole model with the browser's own session (cookies, no bearer token).
    # The step is read from the link itself: the list may gain a newer checkpoint meanwhile.
    href = newest.get_by_test_id("checkpoint-download").get_attribute("href") or ""
    match = re.fullmatch(rf"/api/runs/{swarm.run_id}/checkpoints/(\d+)/model", href)
    assert match, href
    step = int(match[1])
    assert step % CHECKPOINT_EVERY_STEPS == 0, step
    response = page.request.get(href)
    assert response.status == 200, response.text()
    assert response.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(response.body())) as archive:
        names = archive.namelist()
        assert "config.json" in names and "stage-0.safetensors" in names, names
        config = archive.read("config.json").decode()
    assert f'"step": {step}' in config and '"model_preset": "tiny"' in config

    # A checkpoint event (shown in its own style) reloads the list: a newer step appears without a
    # page reload. "Checkpoint now" asks for one at the next step.
    panel.get_by_role("button", name="Checkpoint now").click()
    assert "Requested at step" in panel.get_by_test_id("checkpoint-notice").inner_text()
    log = page.get_by_test_id("event-log")
    log.locator('[data-kind="checkpoint_requested"]').first.wait_for()
    wait_until(
        lambda: int(rows.first.get_attribute("data-step") or -1) > step,
        PEER_START_S,
        f"a checkpoint newer than step {step} listed after a checkpoint event",
        lambda: _diagnostics(coordinator, swarm),
        swarm.peers.all_exited,
    )
    # The newest checkpoint event may sit in a closed fold of routine checkpoints: its text is read
    # from the page, not from what is on screen.
    event = log.locator('[data-kind="checkpoint"]').first
    assert "tone-save" in (event.get_attribute("class") or "")
    assert "complete" in (event.text_content() or "")
    panel.scroll_into_view_if_needed()
    screenshot(page, "run-page-checkpoints")

    # The runs list shows what the list API now returns: parameters, latest loss, live peers.
    page.goto("/#/")
    row = page.locator(f'[data-testid=run-row][data-run-id="{swarm.run_id}"]')
    row.wait_for()
    assert "249.5k parameters" in row.get_by_test_id("run-parameters").inner_text()
    assert 0 < float(row.get_by_test_id("run-loss").inner_text()) < 10
    assert row.get_by_test_id("run-peers").inner_text().startswith("2")
    screenshot(page, "runs-list")


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
