"""Every page at a phone's width (390 x 844): nothing makes the page scroll sideways (wide tables
scroll inside their own box, charts take the width they get). A screenshot of each page is kept as
test-artifacts/screenshots/phone-<page>.png."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from browser_helpers import ADMIN, OWNER, screenshot, sign_in

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}


@contextlib.contextmanager
def _phone(browser, coordinator) -> Iterator[object]:
    context = browser.new_context(base_url=coordinator.url, viewport=PHONE, device_scale_factor=1)
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def _fits(page, name: str) -> None:
    """The page is no wider than the window; its screenshot is saved either way."""
    page.wait_for_load_state("networkidle")
    screenshot(page, f"phone-{name}")
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{name}: the page is {widths[0]} px wide in a {widths[1]} px window"


def test_every_page_fits_a_phone(browser, coordinator, owner_api, admin_api) -> None:
    # Long names and a run with several stages and tokens make the tables and headers wide.
    run = owner_api.post(
        "/api/runs", json={"name": "a run with a rather long name to wrap on a phone", "num_stages": 4}
    ).json()
    other = owner_api.post("/api/runs", json={"name": "a second run to compare with", "seq_len": 32}).json()
    owner_api.post(f"/api/runs/{run['id']}/tokens", json={"label": "friends and family"}).raise_for_status()
    invitation = admin_api.post("/api/invitations", json={}).json()

    with _phone(browser, coordinator) as page:
        page.goto("/")
        page.get_by_role("button", name="Sign in").wait_for()
        _fits(page, "login")

        page.goto(f"/#/invite/{invitation['token']}")
        page.get_by_role("button", name="Create account").wait_for()
        _fits(page, "invite")

        sign_in(page, *OWNER)
        page.get_by_test_id("runs-table").wait_for()
        _fits(page, "runs")

        page.goto(f"/#/runs/{run['id']}")
        page.get_by_test_id("loss-chart").wait_for()
        _fits(page, "run")

        page.goto(f"/#/compare?runs={run['id']},{other['id']}")
        page.get_by_test_id("settings-diff").wait_for()
        _fits(page, "compare")

        page.goto("/#/runs/new")
        page.locator("#f-model_preset option").nth(1).wait_for(state="attached")
        _fits(page, "new-run")

        page.goto("/#/account")
        page.get_by_test_id("change-password").wait_for()
        _fits(page, "account")

        page.get_by_role("button", name="Sign out").click()
        sign_in(page, *ADMIN)
        page.goto("/#/admin")
        page.get_by_test_id("admin-runs").wait_for()
        page.get_by_role("button", name="Invite an owner").click()
        page.get_by_test_id("issued-link").wait_for()
        runs = page.get_by_test_id("admin-runs")
        runs.locator("tr", has_text=run["name"]).get_by_role("button", name="show").click()
        page.get_by_test_id(f"tokens-{run['id']}").wait_for()
        _fits(page, "admin")
