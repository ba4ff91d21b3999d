"""Helpers for the browser tests: the coordinator and peer processes, signing in, screenshots."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]

BIN = Path(sys.executable).parent
FRONTEND_DIST = ROOT / "frontend" / "dist"
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ADMIN = ("admin", "admin password 1")
OWNER = ("olivia", "olivia password 1")
HEARTBEAT_TIMEOUT_S = 4
CHECKPOINT_EVERY_STEPS = 2
"""The browser tests' coordinator checkpoints this often, so a swarm test sees checkpoints soon."""


def tool(name: str) -> str:
    path = BIN / name
    return str(path) if path.exists() else (shutil.which(name) or name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_process(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGINT (like Ctrl-C), then SIGKILL if it does not leave in time."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


@dataclass
class Coordinator:
    url: str
    log: Path
    process: subprocess.Popen
    database_url: str
    """Its database, for tests that lay down history (steps, events) no browser action makes quickly."""

    def api(self, username: str, password: str) -> httpx.Client:
        """An API client signed in with a bearer token (no cookies, so no CSRF header needed)."""
        response = httpx.post(f"{self.url}/api/auth/login", json={"username": username, "password": password})
        response.raise_for_status()
        token = response.json()["token"]
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=10)

    def log_tail(self) -> str:
        return tail(self.log)


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def sign_in(page, username: str, password: str) -> None:
    page.goto("/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_test_id("current-user").wait_for()


@dataclass
class PeerProcess:
    name: str
    process: subprocess.Popen
    log: Path

    def log_tail(self) -> str:
        return tail(self.log)


@dataclass
class Peers:
    """Starts real `swarmhub-peer join` processes and stops them after the test."""

    workdir: Path
    started: list[PeerProcess] = field(default_factory=list)

    def join(self, join_command: str, name: str, *extra: str) -> PeerProcess:
        words = join_command.split()
        assert words[:2] == ["swarmhub-peer", "join"], join_command
        log = self.workdir / f"{name}.log"
        env = {**os.environ, "SWARMHUB_PEER_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        with log.open("w") as out:
            process = subprocess.Popen(
                [tool("swarmhub-peer"), *words[1:], "--name", name, "--threads", "1", "-v", *extra],
                env=env,
                cwd=self.workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        peer = PeerProcess(name=name, process=process, log=log)
        self.started.append(peer)
        return peer

    def all_exited(self) -> str | None:
        """A reason to stop waiting when every started peer process has exited."""
        if self.started and all(p.process.poll() is not None for p in self.started):
            return "every peer process exited"
        return None

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} (exit {p.process.poll()}) ---\n{p.log_tail()}" for p in self.started)


def wait_until(
    predicate: Callable[[], object],
    timeout_s: float,
    what: str,
    on_fail: Callable[[], str],
    give_up: Callable[[], str | None] = lambda: None,
) -> None:
    """Poll `predicate`; fail with `on_fail()` after the timeout, or at once if `give_up()` says why."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        reason = give_up()
        if reason:
            pytest.fail(f"gave up waiting for {what}: {reason}\n{on_fail()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}\n{on_fail()}")
        time.sleep(0.25)
