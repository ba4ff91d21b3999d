"""The dashboard against the real coordinator: sign-in, the create-run form and its validation,
who sees which runs, join tokens, and the live feed reconnecting."""

from __future__ import annotations

import re

import pytest
from browser_helpers import ADMIN, OWNER, screenshot, sign_in

pytestmark = pytest.mark.browser

SMALL_RUN = {
    "model_preset": "tiny",
    "num_stages": 1,
    "target_batch_size": 8,
    "microbatch_size": 4,
    "seq_len": 32,
    "max_steps": 1000,
}


def test_sign_in_rejects_a_wrong_password_then_signs_in_and_out(page) -> None:
    page.goto("/")
    page.get_by_label("Username").fill(OWNER[0])
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("alert").filter(has_text="invalid username or password").wait_for()

    sign_in(page, *OWNER)
    assert OWNER[0] in page.get_by_test_id("current-user").inner_text()
    assert page.get_by_role("link", name="Admin", exact=True).count() == 0, "owners get no admin link"
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("button", name="Sign in").wait_for()
    page.reload()
    page.get_by_role("button", name="Sign in").wait_for()  # the session is really gone


def test_create_run_shows_client_and_server_validation_next_to_fields(page, owner_api) -> None:
    sign_in(page, *OWNER)
    page.goto("/#/runs/new")
    page.get_by_label("Name").fill("validated run")
    # The presets come from GET /api/presets: wait for the list (more than the placeholder option).
    page.locator("#f-model_preset option").nth(1).wait_for(state="attached")
    page.get_by_label("Model preset").select_option("tiny")
    assert "249.5k parameters" in page.locator(".field", has=page.get_by_label("Model preset")).inner_text()

    # Client-side: a microbatch larger than the batch, and a sequence longer than the preset allows,
    # in the words the coordinator would use (swarmhub/setting_messages.py).
    page.get_by_label("Target batch size").fill("8")
    page.get_by_label("Microbatch size").fill("16")
    page.get_by_label("Sequence length").fill("4096")
    # Spot checks are an advanced setting, collapsed at first, and a percentage in the form (the
    # server's fraction 0.02 shows as 2).
    spot_checks = page.get_by_label("Spot checks, % of stage calls")
    assert not spot_checks.is_visible()
    page.get_by_test_id("advanced-settings").locator("summary").click()
    assert spot_checks.input_value() == "2"
    spot_checks.fill("150")
    # Closed again: the refused spot-check share opens the section to show itself.
    page.get_by_test_id("advanced-settings").locator("summary").click()
    page.get_by_role("button", name="Create run").click()
    target_error = page.locator('.field-error[data-field="target_batch_size"]')
    target_error.wait_for()
    assert target_error.inner_text() == "Must be a multiple of microbatch_size (16)."
    assert (
        page.locator('.field-error[data-field="seq_len"]').inner_text()
        == "Must be at most 256 for preset 'tiny'."
    )
    spot_error = page.locator('.field-error[data-field="spot_check_fraction"]')
    assert spot_error.is_visible() and spot_error.inner_text() == "Must be at most 100%."
    assert page.get_by_label("Target batch size").get_attribute("aria-invalid") == "true"
    screenshot(page, "create-run-client-validation")

    # Server-side: only the coordinator refuses a path for a dataset (peers never read one); its
    # 422 is placed next to the field it names.
    page.get_by_label("Microbatch size").fill("4")
    page.get_by_label("Sequence length").fill("32")
    spot_checks.fill("5")
    page.get_by_label("Dataset").fill("relative/corpus.txt")
    with page.expect_response(lambda r: r.url.endswith("/api/runs") and r.request.method == "POST") as sent:
        page.get_by_role("button", name="Create run").click()
    assert sent.value.status == 422
    dataset_error = page.locator('.field-error[data-field="dataset"]')
    dataset_error.wait_for()
    assert "paths on the participants' machines are not accepted" in dataset_error.inner_text()
    screenshot(page, "create-run-server-validation")

    page.get_by_label("Dataset").fill("python-stdlib")
    page.get_by_role("button", name="Create run").click()
    page.wait_for_url(re.compile(r"#/runs/\d+$"))
    assert page.get_by_test_id("run-name").inner_text() == "validated run"
    assert "249.5k parameters" in page.locator(".run-page .page-head").inner_text()
    assert page.get_by_test_id("spot-check-fraction").inner_text() == "spot checks 5%"
    page.get_by_test_id("spot-checks").wait_for()
    # Where a step's time goes: the card is there before any step, and its text alternative says so.
    page.get_by_test_id("step-time").get_by_role("heading", name="Where a step's time goes").wait_for()
    assert page.get_by_test_id("step-time-summary").inner_text() == "No step has a time split yet."
    assert page.get_by_test_id("step-time-chart").get_attribute("data-points") == "0"
    run_id = int(page.url.rsplit("/", 1)[1])
    assert owner_api.get(f"/api/runs/{run_id}").json()["spot_check_fraction"] == 0.05


def test_create_run_form_has_basic_and_advanced_settings_and_estimates_the_swarm(page) -> None:
    sign_in(page, *OWNER)
    page.goto("/#/runs/new")
    page.locator("#f-model_preset option").nth(1).wait_for(state="attached")
    # Basic settings show at once; the advanced ones wait behind their summary.
    for label in (
        "Name",
        "Model preset",
        "Pipeline stages",
        "Target batch size",
        "Microbatch size",
        "Max steps",
    ):
        assert page.get_by_label(label).is_visible(), label
    advanced = page.get_by_test_id("advanced-settings")
    assert advanced.get_attribute("open") is None
    assert not page.get_by_label("Learning rate").is_visible()

    # The estimate follows the settings: the coordinator's memory per stage, and the peers it takes.
    page.get_by_label("Model preset").select_option("swarm-ref")
    page.get_by_label("Pipeline stages").fill("4")
    page.get_by_label("Microbatch size").fill("8")
    page.get_by_label("Sequence length").fill("128")
    estimate = page.get_by_test_id("run-estimate")
    stages = estimate.get_by_test_id("run-estimate-stage")
    stages.nth(3).wait_for()
    assert stages.count() == 4
    summary = estimate.get_by_test_id("run-estimate-summary").inner_text()
    assert summary.startswith("Needs at least 4 peers (one per stage), 8 recommended (two per stage)"), (
        summary
    )
    assert "a step is 4 microbatches" in summary, summary
    # The vocabulary head makes the last stage the heaviest.
    assert "(heaviest)" in stages.nth(3).inner_text()
    assert re.search(r"\d+(\.\d+)? (MiB|GiB)", stages.nth(0).inner_text())

    page.get_by_label("Pipeline stages").fill("2")
    stages.nth(2).wait_for(state="detached")
    assert "Needs at least 2 peers" in estimate.get_by_test_id("run-estimate-summary").inner_text()

    advanced.locator("summary").click()
    page.get_by_label("Learning rate").wait_for()
    # Every field explains itself with its setting's description (generated from RunSettings).
    assert (
        "Steps of linear warm-up"
        in page.locator(".field", has=page.get_by_label("Warm-up steps")).inner_text()
    )
    screenshot(page, "create-run-basic-advanced-estimate")


def test_run_page_shows_the_install_line_and_a_tokens_command_again(
    page, browser, coordinator, owner_api
) -> None:
    run = owner_api.post("/api/runs", json={"name": "install run", **SMALL_RUN}).json()
    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{run['id']}")
    # A fresh machine first installs the peer package, straight from this coordinator.
    install = page.get_by_test_id("install-command").inner_text()
    match = re.fullmatch(
        r'pip install "swarmhub\[peer\] @ (\S+/downloads/swarmhub-[\w.]+-py3-none-any\.whl)"', install
    )
    assert match and match.group(1).startswith(coordinator.url), install
    wheel = owner_api.get(match.group(1))
    assert wheel.status_code == 200 and wheel.content[:2] == b"PK"  # a zip: the wheel

    page.get_by_label("Token label").fill("lab-a")
    page.get_by_role("button", name="Issue join token").click()
    command = page.get_by_test_id("join-command").inner_text()
    row = page.get_by_test_id("tokens-table").locator("tbody tr").filter(has_text="lab-a")
    row.wait_for()
    # Reloaded, the page no longer holds the command; this browser remembers it for the owner.
    page.reload()
    row.get_by_role("button", name="Show command").click()
    assert page.get_by_test_id("join-command").inner_text() == command
    screenshot(page, "run-page-install-and-join")

    # Another browser never saw it (the coordinator keeps only a hash): it issues a token like it.
    other = browser.new_context(base_url=coordinator.url, viewport={"width": 1400, "height": 1000})
    try:
        elsewhere = other.new_page()
        sign_in(elsewhere, *OWNER)
        elsewhere.goto(f"/#/runs/{run['id']}")
        other_row = elsewhere.get_by_test_id("tokens-table").locator("tbody tr").filter(has_text="lab-a")
        assert other_row.get_by_role("button", name="Show command").count() == 0
        other_row.get_by_role("button", name="New token like this").click()
        new_command = elsewhere.get_by_test_id("join-command").inner_text()
        assert new_command != command and new_command.startswith("swarmhub-peer join ")
    finally:
        other.close()
    tokens = owner_api.get(f"/api/runs/{run['id']}/tokens").json()
    assert [(t["label"], t["revoked_at"]) for t in tokens] == [("lab-a", None), ("lab-a", None)]


def test_owners_see_their_own_runs_and_admins_see_all(page, owner_api, admin_api) -> None:
    owner_run = owner_api.post("/api/runs", json={"name": "owner-only run", **SMALL_RUN}).json()
    admin_run = admin_api.post("/api/runs", json={"name": "admin-only run", **SMALL_RUN}).json()

    sign_in(page, *OWNER)
    table = page.get_by_test_id("runs-table")
    table.get_by_role("link", name=owner_run["name"]).wait_for()
    assert table.get_by_role("link", name=admin_run["name"]).count() == 0

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, *ADMIN)
    table.get_by_role("link", name=admin_run["name"]).wait_for()
    table.get_by_role("link", name=owner_run["name"]).wait_for()


def test_join_token_is_issued_shown_once_and_revoked(page, coordinator, owner_api) -> None:
    run = owner_api.post("/api/runs", json={"name": "token run", **SMALL_RUN}).json()
    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{run['id']}")
    page.get_by_label("Token label").fill("lab-gpu-3")
    page.get_by_role("button", name="Issue join token").click()
    command = page.get_by_test_id("join-command").inner_text()
    assert re.fullmatch(rf"swarmhub-peer join {re.escape(coordinator.url)}/? --token \S{{8,}}", command), (
        command
    )
    rows = page.get_by_test_id("tokens-table").locator("tbody tr")
    # The table re-renders after the issue call returns: wait for the row before counting.
    rows.filter(has_text="lab-gpu-3").wait_for()
    assert rows.count() == 1
    screenshot(page, "run-page-join-token")

    rows.first.get_by_role("button", name="Revoke").click()
    page.get_by_test_id("tokens-table").wait_for(state="detached")
    assert page.get_by_test_id("join-command").count() == 0
    tokens = owner_api.get(f"/api/runs/{run['id']}/tokens").json()
    assert len(tokens) == 1 and tokens[0]["revoked_at"] is not None
    assert not tokens[0]["verifier"]

    page.get_by_label("Token label").fill("my-own-box")
    page.get_by_label("verifier token (for my own machines: trusted referees)").check()
    page.get_by_role("button", name="Issue join token").click()
    row = page.get_by_test_id("tokens-table").locator("tbody tr").filter(has_text="my-own-box")
    row.get_by_test_id("verifier-badge").wait_for()
    screenshot(page, "run-page-verifier-token")
    # Unticked again, so that the next token, perhaps for someone else, is an ordinary one.
    assert not page.get_by_label("verifier token (for my own machines: trusted referees)").is_checked()
    tokens = owner_api.get(f"/api/runs/{run['id']}/tokens").json()
    assert [t["verifier"] for t in tokens if t["label"] == "my-own-box"] == [True]


def test_pause_and_resume_buttons_change_the_run_status(page, owner_api) -> None:
    run = owner_api.post("/api/runs", json={"name": "pausable run", **SMALL_RUN}).json()
    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{run['id']}")
    page.get_by_role("button", name="Pause").click()
    page.get_by_role("button", name="Resume").wait_for()
    assert owner_api.get(f"/api/runs/{run['id']}").json()["status"] == "paused"
    page.get_by_role("button", name="Resume").click()
    page.get_by_role("button", name="Pause").wait_for()
    assert owner_api.get(f"/api/runs/{run['id']}").json()["status"] == "active"


def test_feed_reconnects_and_rereads_the_snapshot(page, owner_api) -> None:
    """Drop the dashboard's websocket: the page backs off, reconnects and gets a fresh snapshot."""
    run = owner_api.post("/api/runs", json={"name": "reconnecting run", **SMALL_RUN}).json()
    connections = []
    snapshots = []

    def route(ws) -> None:
        if connections:
            # Reconnecting: change the run while the page is cut off, so only a fresh snapshot
            # can tell the page about it.
            owner_api.post(f"/api/runs/{run['id']}/pause").raise_for_status()
        server = ws.connect_to_server()

        def to_page(message) -> None:
            if isinstance(message, str) and '"type":"snapshot"' in message.replace(" ", ""):
                snapshots.append(message)
            ws.send(message)

        server.on_message(to_page)
        connections.append(ws)

    page.route_web_socket(re.compile(r".*/ws/runs/\d+/feed$"), route)
    sign_in(page, *OWNER)
    page.goto(f"/#/runs/{run['id']}")
    status = page.get_by_test_id("feed-status")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=feed-status]')?.dataset.status === 'live'"
    )
    assert len(connections) == 1 and len(snapshots) == 1

    page.get_by_role("button", name="Pause").wait_for()
    connections[0].close(code=1011, reason="test drops the feed")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=feed-status]')?.dataset.status === 'reconnecting'"
    )
    page.wait_for_function(
        "() => document.querySelector('[data-testid=feed-status]')?.dataset.status === 'live'"
    )
    assert len(connections) == 2
    assert len(snapshots) == 2
    assert status.get_attribute("data-status") == "live"
    page.get_by_role("button", name="Resume").wait_for()  # the run as the new snapshot has it
