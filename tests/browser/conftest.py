"""Browser tests: the real coordinator (`swarmhub serve`) in a subprocess serving the built
dashboard, headless Debian Chromium through Playwright, and real peers (`swarmhub-peer join`).

Only tests marked `browser` use these fixtures; `test_generated_types.py` needs none of them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, Path(__file__).resolve().parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from browser_helpers import (  # noqa: E402
    ADMIN,
    CHECKPOINT_EVERY_STEPS,
    CHROMIUM,
    CHROMIUM_ARGS,
    FRONTEND_DIST,
    HEARTBEAT_TIMEOUT_S,
    OWNER,
    SCREENSHOTS,
    Coordinator,
    Peers,
    free_port,
    stop_process,
    tail,
    tool,
)

from tests.required import import_module  # noqa: E402


@pytest.fixture(scope="session")
def frontend_dist() -> Path:
    """The built dashboard; built here once (`npm ci && npm run build`) when missing.

    SWARMHUB_TEST_FRONTEND_DIST points at another build, so that several people editing the
    dashboard in one checkout each test their own without clobbering `frontend/dist`.
    """
    override = os.environ.get("SWARMHUB_TEST_FRONTEND_DIST")
    if override:
        return Path(override)
    if not (FRONTEND_DIST / "index.html").is_file():
        if shutil.which("npm") is None:
            pytest.fail("frontend/dist is missing and npm is not installed: run `make frontend`")
        frontend = ROOT / "frontend"
        if not (frontend / "node_modules").is_dir():
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=frontend, check=True)
        subprocess.run(["npm", "run", "build"], cwd=frontend, check=True)
    return FRONTEND_DIST


@pytest.fixture(scope="session")
def coordinator(tmp_path_factory: pytest.TempPathFactory, frontend_dist: Path) -> Iterator[Coordinator]:
    """`swarmhub serve` on a free port over a fresh SQLite file, with an admin and an owner."""
    workdir = tmp_path_factory.mktemp("coordinator")
    database_url = f"sqlite:///{workdir / 'swarmhub.sqlite'}"
    db_flag = ("--database-url", database_url)
    env = {
        **os.environ,
        "SWARMHUB_FRONTEND_DIR": str(frontend_dist),
        "SWARMHUB_CHECKPOINT_DIR": str(workdir / "checkpoints"),
        "SWARMHUB_PEER_PACKAGE_DIR": str(workdir / "peer-package"),
        "SWARMHUB_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S),
        "SWARMHUB_CHECKPOINT_EVERY_STEPS": str(CHECKPOINT_EVERY_STEPS),
        "PYTHONUNBUFFERED": "1",
    }
    subprocess.run(
        [tool("swarmhub"), "create-admin", "--username", ADMIN[0], "--password-stdin", *db_flag],
        input=ADMIN[1] + "\n",
        text=True,
        env=env,
        cwd=workdir,
        check=True,
        capture_output=True,
    )
    port = free_port()
    log = workdir / "coordinator.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [tool("swarmhub"), "serve", "--host", "127.0.0.1", "--port", str(port), *db_flag],
            env=env,
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            pytest.fail(f"swarmhub serve exited with {process.returncode}:\n{tail(log)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        if time.monotonic() > deadline:
            stop_process(process)
            pytest.fail(f"swarmhub serve did not answer /healthz within 60 s:\n{tail(log)}")
        time.sleep(0.2)
    coordinator = Coordinator(url=url, log=log, process=process, database_url=database_url)
    with coordinator.api(*ADMIN) as admin:
        admin.post(
            "/api/users", json={"username": OWNER[0], "password": OWNER[1], "role": "owner"}
        ).raise_for_status()
    try:
        yield coordinator
    finally:
        stop_process(process)


# Per module, not per session: Playwright's sync API keeps an event loop running in this thread
# until it stops, and later tests' asyncio.run() would find it there.
@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    sync_api = import_module("playwright.sync_api", "pip install -e '.[dev]' (make install does it)")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make services does it)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser, coordinator: Coordinator, request: pytest.FixtureRequest) -> Iterator[object]:
    """A fresh browser context (no cookies) on the dashboard; console errors end up in the report."""
    context = browser.new_context(base_url=coordinator.url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        if getattr(request.node, "rep_call_failed", False):
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(Exception):
                page.screenshot(path=str(SCREENSHOTS / f"FAILED-{request.node.name}.png"), full_page=True)
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when == "call":
        item.rep_call_failed = report.failed
    return report


@pytest.fixture
def peers(tmp_path: Path) -> Iterator[Peers]:
    peers = Peers(workdir=tmp_path)
    try:
        yield peers
    finally:
        for peer in peers.started:
            stop_process(peer.process)


@pytest.fixture
def owner_api(coordinator: Coordinator) -> Iterator[httpx.Client]:
    with coordinator.api(*OWNER) as client:
        yield client


@pytest.fixture
def admin_api(coordinator: Coordinator) -> Iterator[httpx.Client]:
    with coordinator.api(*ADMIN) as client:
        yield client
