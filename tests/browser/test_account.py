"""The account page and the admin's user list against the real coordinator, under its
content-security policy: changing a password (and ending the other sessions), disabling a user."""

from __future__ import annotations

import httpx
import pytest
from browser_helpers import ADMIN, screenshot, sign_in

pytestmark = pytest.mark.browser

PAT = ("pat", "pat's first password")
NEW_PASSWORD = "pat's second, longer password"


def _csp_violations(page) -> list[str]:
    violations: list[str] = []

    def record(message) -> None:
        if "Content Security Policy" in message.text:
            violations.append(message.text)

    page.on("console", record)
    return violations


def test_changing_the_password_ends_the_other_sessions(page, coordinator, admin_api) -> None:
    admin_api.post("/api/users", json={"username": PAT[0], "password": PAT[1]}).raise_for_status()
    violations = _csp_violations(page)
    with coordinator.api(*PAT) as elsewhere:  # pat, signed in on another machine
        sign_in(page, *PAT)
        page.get_by_role("link", name="Account").click()
        form = page.get_by_test_id("change-password")
        form.get_by_label("Current password").fill(PAT[1])
        form.get_by_label("New password", exact=True).fill("too short")
        form.get_by_label("Repeat the new password").fill("too short")
        form.get_by_role("button", name="Change password").click()
        form.get_by_role("alert").filter(has_text="at least 12 characters").wait_for()

        form.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
        form.get_by_label("Repeat the new password").fill(NEW_PASSWORD)
        form.get_by_role("button", name="Change password").click()
        form.get_by_role("status").filter(has_text="Password changed. 1 other session ended.").wait_for()
        screenshot(page, "account-password-changed")
        assert elsewhere.get("/api/auth/me").status_code == 401
        assert page.get_by_test_id("current-user").is_visible()  # this session stays

    page.get_by_role("button", name="Sign out").click()
    old = httpx.post(f"{coordinator.url}/api/auth/login", json={"username": PAT[0], "password": PAT[1]})
    assert old.status_code == 401
    sign_in(page, PAT[0], NEW_PASSWORD)
    assert not violations, violations


def test_an_admin_disables_a_user_from_the_admin_page(page, coordinator, admin_api) -> None:
    quinn_account = {"username": "quinn", "password": "quinn's password"}
    admin_api.post("/api/users", json=quinn_account).raise_for_status()
    violations = _csp_violations(page)
    with coordinator.api("quinn", "quinn's password") as quinn:
        sign_in(page, *ADMIN)
        page.get_by_role("link", name="Admin", exact=True).click()
        row = page.locator('[data-testid="admin-user"][data-username="quinn"]')
        page.once("dialog", lambda dialog: dialog.accept())
        row.get_by_role("button", name="Disable").click()
        row.get_by_role("button", name="Enable").wait_for()
        assert "disabled" in row.inner_text()
        assert quinn.get("/api/auth/me").status_code == 401
    assert not violations, violations
