"""Invitations in the dashboard: an admin invites a second owner, who opens the link in a browser of
their own, chooses a name and password, signs in and creates a run that the admin sees as theirs."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import pytest
from browser_helpers import ADMIN, screenshot, sign_in

from tests.required import import_module

pytestmark = pytest.mark.browser

SAM = ("sam", "sam's own long password")


@contextlib.contextmanager
def _other_browser(browser, coordinator) -> Iterator[object]:
    """A second browser context: no cookies shared with the admin's."""
    context = browser.new_context(base_url=coordinator.url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def test_an_invited_owner_signs_up_signs_in_and_creates_a_run(page, browser, coordinator, admin_api) -> None:
    expect = import_module("playwright.sync_api", "pip install -e '.[dev]' (make install does it)").expect
    sign_in(page, *ADMIN)
    page.get_by_role("link", name="Admin", exact=True).click()
    page.get_by_role("button", name="Invite an owner").click()
    issued = page.get_by_test_id("issued-link")
    link = issued.get_by_test_id("issued-url").input_value()
    assert re.fullmatch(rf"{re.escape(coordinator.url)}/#/invite/[A-Za-z0-9_-]{{40,}}", link), link
    open_links = admin_api.get("/api/invitations").json()
    expect(page.get_by_test_id("open-link")).to_have_count(len(open_links))
    issued_id = max(link["id"] for link in open_links)
    screenshot(page, "invitation-issued")

    with _other_browser(browser, coordinator) as invitee:
        invitee.goto(link)
        form = invitee.get_by_test_id("invite-form")
        form.get_by_role("heading", name="Join SwarmHub").wait_for()
        form.get_by_label("Username").fill(SAM[0])
        form.get_by_label("New password", exact=True).fill(SAM[1])
        form.get_by_label("Repeat the new password").fill(SAM[1])
        screenshot(invitee, "invitation-accept")
        form.get_by_role("button", name="Create account").click()
        form.get_by_role("status").filter(has_text=f"Account {SAM[0]} created.").wait_for()
        form.get_by_role("button", name="Go to sign in").click()

        invitee.get_by_label("Username").fill(SAM[0])
        invitee.get_by_label("Password").fill(SAM[1])
        invitee.get_by_role("button", name="Sign in").click()
        assert invitee.get_by_test_id("current-user").inner_text() == f"{SAM[0]} (owner)"

        invitee.get_by_role("navigation").get_by_role("link", name="New run").click()
        invitee.get_by_label("Name").fill("sam's first run")
        invitee.get_by_role("button", name="Create run").click()
        invitee.wait_for_url(re.compile(r"#/runs/\d+$"))
        assert invitee.get_by_test_id("run-name").inner_text() == "sam's first run"
        assert invitee.get_by_test_id("run-owner").inner_text() == f"by {SAM[0]}"
        run_id = int(invitee.url.rsplit("/", 1)[1])

    # The link worked once: opening it again says so.
    with _other_browser(browser, coordinator) as latecomer:
        latecomer.goto(link)
        latecomer.get_by_role("alert").filter(has_text="used already").wait_for()

    page.reload()
    page.get_by_test_id("admin-runs").locator("tr", has_text="sam's first run").filter(
        has_text=SAM[0]
    ).wait_for()
    # Used, so no longer open: one link fewer in the list.
    expect(page.get_by_test_id("open-link")).to_have_count(len(open_links) - 1)
    assert issued_id not in {link["id"] for link in admin_api.get("/api/invitations").json()}
    page.get_by_role("link", name="Runs").click()
    row = page.locator(f'[data-testid="run-row"][data-run-id="{run_id}"]')
    assert row.get_by_test_id("run-owner").inner_text() == SAM[0]
    assert admin_api.get(f"/api/runs/{run_id}").json()["owner_name"] == SAM[0]


def test_a_reset_link_from_the_admin_page_sets_a_new_password(page, browser, coordinator, admin_api) -> None:
    admin_api.post(
        "/api/users", json={"username": "rita", "password": "rita's old password"}
    ).raise_for_status()
    sign_in(page, *ADMIN)
    page.get_by_role("link", name="Admin", exact=True).click()
    page.locator('[data-testid="admin-user"][data-username="rita"]').get_by_role(
        "button", name="Reset password"
    ).click()
    issued = page.get_by_test_id("issued-link")
    issued.filter(has_text="Password reset for rita").wait_for()
    link = issued.get_by_test_id("issued-url").input_value()

    with _other_browser(browser, coordinator) as rita:
        rita.goto(link)
        form = rita.get_by_test_id("invite-form")
        form.get_by_role("heading", name="Reset password").wait_for()
        assert form.get_by_label("Username").count() == 0
        form.get_by_label("New password", exact=True).fill("rita's new password")
        form.get_by_label("Repeat the new password").fill("rita's new password")
        form.get_by_role("button", name="Set password").click()
        form.get_by_role("status").filter(has_text="Password of rita set.").wait_for()
        form.get_by_role("button", name="Go to sign in").click()
        sign_in(rita, "rita", "rita's new password")
