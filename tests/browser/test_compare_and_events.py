"""Run comparison (overlaid losses, the settings that differ, tags and notes, archiving) and the
event log's filters and folded checkpoints, against the real coordinator.

The runs' history (steps with losses, checkpoint events) is written into the coordinator's
database: a real swarm would take minutes to make thirty steps and a row of checkpoints."""

from __future__ import annotations

import pytest
from browser_helpers import OWNER, screenshot, sign_in
from playwright.sync_api import expect

from server.db import make_engine, make_session_factory
from server.models import Run
from server.services.events import record_event
from server.services.steps import record_step

pytestmark = pytest.mark.browser

SMALL_RUN = {
    "model_preset": "tiny",
    "num_stages": 2,
    "target_batch_size": 8,
    "microbatch_size": 4,
    "seq_len": 32,
}
STEPS = 30


def _history(database_url: str, run_id: int, first_loss: float, *, checkpoints: int = 0) -> None:
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            for step in range(STEPS):
                record_step(
                    session,
                    run_id=run_id,
                    step=step,
                    loss=first_loss - 2 * step / STEPS,
                    samples_sent=8,
                    samples_lost=0,
                    samples_counted=[8, 8],
                    duration_s=0.5,
                )
            session.get_one(Run, run_id).current_step = STEPS
            record_event(session, run_id=run_id, kind="peer_lost", message="peer 7 lost (no heartbeat)")
            for k in range(checkpoints):
                step = 10 * (k + 1)
                record_event(
                    session,
                    run_id=run_id,
                    kind="checkpoint",
                    message=f"checkpoint of step {step} complete (2 stages, 3012000 bytes)",
                    data={"step": step, "num_stages": 2, "bytes": 3012000},
                )
            session.commit()
    finally:
        engine.dispose()


def _paused_run(owner_api, name: str, **settings) -> int:
    response = owner_api.post("/api/runs", json={"name": name, **SMALL_RUN, **settings})
    response.raise_for_status()
    run_id = response.json()["id"]
    # Paused, so no live swarm steps it while its history is written.
    owner_api.post(f"/api/runs/{run_id}/pause").raise_for_status()
    return run_id


def test_compare_two_runs_overlays_losses_and_diffs_settings(page, coordinator, owner_api) -> None:
    first = _paused_run(owner_api, "baseline lr", learning_rate=0.003)
    second = _paused_run(owner_api, "lower lr", learning_rate=0.001)
    _history(coordinator.database_url, first, 5.0)
    _history(coordinator.database_url, second, 6.0)
    sign_in(page, *OWNER)

    # The runs list: sparklines, then pick both runs to compare.
    for run_id in (first, second):
        row = page.locator(f'[data-testid=run-row][data-run-id="{run_id}"]')
        row.get_by_test_id("loss-sparkline").wait_for()
        row.get_by_test_id("compare-select").check()
    page.get_by_test_id("compare-link").click()
    page.get_by_test_id("compare-page").wait_for()
    assert f"#/compare?runs={first},{second}" in page.url

    chart = page.get_by_test_id("compare-loss-chart")
    assert int(chart.get_attribute("data-points") or 0) == STEPS
    legend = chart.locator(".u-legend").inner_text()
    assert f"baseline lr (#{first})" in legend and f"lower lr (#{second})" in legend
    assert chart.locator("canvas").first.is_visible()
    summary = chart.get_by_test_id("chart-summary").inner_text()
    assert "falling" in summary

    diff = page.get_by_test_id("settings-diff")
    changed = diff.locator('[data-testid=setting-row][data-differs="true"]')
    assert changed.count() == 1
    assert changed.first.get_attribute("data-setting") == "learning_rate"
    assert "0.003" in changed.first.inner_text() and "0.001" in changed.first.inner_text()
    assert "1 setting differs" in page.get_by_test_id("settings-diff-summary").inner_text()

    # The owner tags a run and writes notes; they are stored on the run.
    card = page.locator(f'[data-testid=compare-run][data-run-id="{second}"]')
    card.get_by_role("button", name="Edit tags and notes").click()
    card.get_by_label("Tags (comma-separated)").fill("lr-sweep, slow")
    card.get_by_label("Notes").fill("Lower rate: slower start.")
    card.get_by_role("button", name="Save").click()
    card.get_by_test_id("run-notes").wait_for()
    assert "lr-sweep" in card.get_by_test_id("run-tags").inner_text()
    stored = owner_api.get(f"/api/runs/{second}").json()
    assert (stored["tags"], stored["notes"]) == (["lr-sweep", "slow"], "Lower rate: slower start.")
    screenshot(page, "compare-runs")

    # Archiving from the comparison hides the run from the list until "show archived" is ticked.
    card.get_by_test_id("archive-toggle").click()
    card.get_by_role("button", name="Unarchive").wait_for()
    page.goto("/#/")
    page.locator(f'[data-testid=run-row][data-run-id="{first}"]').wait_for()
    assert page.locator(f'[data-testid=run-row][data-run-id="{second}"]').count() == 0
    page.get_by_test_id("show-archived").check()
    archived = page.locator(f'[data-testid=run-row][data-run-id="{second}"]')
    archived.wait_for()
    assert "(archived)" in archived.inner_text()
    archived.get_by_role("button", name="Unarchive").click()
    page.get_by_test_id("show-archived").uncheck()
    page.locator(f'[data-testid=run-row][data-run-id="{second}"]').wait_for()
    screenshot(page, "runs-list-sparklines")


def test_event_log_filters_by_kind_and_folds_checkpoints(page, coordinator, owner_api) -> None:
    run_id = _paused_run(owner_api, "events")
    _history(coordinator.database_url, run_id, 5.0, checkpoints=12)
    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{run_id}")
    # The owner's notes are on the run page too.
    labels = page.get_by_test_id("run-labels")
    labels.get_by_role("button", name="Edit tags and notes").click()
    page.get_by_label("Notes").fill("twelve checkpoints")
    page.get_by_role("button", name="Save").click()
    assert page.get_by_test_id("run-notes").inner_text() == "twelve checkpoints"

    log = page.get_by_test_id("event-log")
    fold = log.get_by_test_id("event-fold")
    fold.wait_for()
    assert fold.locator("summary").inner_text().endswith("12 checkpoints, last at step 120")
    fold.locator("summary").click()
    newest = fold.locator('[data-testid=event][data-kind="checkpoint"]').first
    assert "(2 stages, 3.0 MB)" in newest.inner_text()
    assert "3012000" not in log.inner_text()

    # Only peer_lost: the checkpoints and the run's own events go.
    log.locator('[data-filter-kind="peer_lost"]').check()
    shown = log.get_by_test_id("event")
    assert shown.count() == 1 and shown.first.get_attribute("data-kind") == "peer_lost"
    assert log.get_by_test_id("event-fold").count() == 0
    log.get_by_role("button", name="Show all").click()
    log.get_by_test_id("event-fold").wait_for()

    # The charts offer their options and a text alternative.
    chart = page.get_by_test_id("loss-chart")
    assert int(chart.get_attribute("data-points") or 0) == STEPS
    # A drag across the plot zooms into those steps; "Reset zoom" shows them all again.
    reset = chart.get_by_role("button", name="Reset zoom")
    assert reset.is_disabled()
    chart.locator(".u-over").scroll_into_view_if_needed()
    plot = chart.locator(".u-over").bounding_box()
    assert plot is not None
    middle = plot["y"] + plot["height"] / 2
    page.mouse.move(plot["x"] + plot["width"] * 0.3, middle)
    page.mouse.down()
    page.mouse.move(plot["x"] + plot["width"] * 0.6, middle, steps=5)
    page.mouse.up()
    expect(reset).to_be_enabled()
    reset.click()
    expect(reset).to_be_disabled()
    chart.get_by_label("smooth (EMA)").check()
    chart.get_by_label("log scale").check()
    chart.get_by_label("wall clock").check()
    with page.expect_download() as download:
        chart.get_by_test_id("csv-export").click()
    lines = download.value.path().read_text().splitlines()
    assert lines[0] == "time_unix_s,loss (EMA)" and len(lines) == STEPS + 1
    assert "latest" in chart.get_by_test_id("chart-summary").inner_text()
    stage_chart = page.get_by_test_id("stage-rate-chart")
    assert "stage 0" in stage_chart.locator(".u-legend").inner_text()
    # 8 samples in 0.5 s a step: each stage served 16 samples/s, no more than the run did.
    assert "served 16.0 samples/s" in page.get_by_test_id("stage-0").get_by_test_id("stage-rate").inner_text()
    log.scroll_into_view_if_needed()
    screenshot(page, "run-page-event-log-folded")
