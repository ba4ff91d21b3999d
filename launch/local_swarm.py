"""A whole swarm on this machine: one coordinator process and N peer processes over loopback.

Used by `swarmhub demo`, the multi-process tests and the benchmarks, so that all three exercise
the same real commands a user runs (`swarmhub serve`, `swarmhub-peer join`).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ADMIN_USERNAME = "admin"
STARTUP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def console_script(name: str) -> str:
    """A console script of this installation (next to the running interpreter)."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


@dataclass
class PeerProcess:
    index: int
    process: subprocess.Popen[bytes]
    log_path: Path
    options: list[str]

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class LocalSwarm:
    """Start with `start()`, stop with `stop()` (or use as a context manager)."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="swarmhub-")))
    port: int = 0
    host: str = "127.0.0.1"
    """Where the coordinator listens (0.0.0.0: every interface, for peers on other machines)."""
    public_url: str = ""
    """`swarmhub serve --public-url`: the URL join commands name; local peers join through it too."""
    launcher: tuple[str, ...] = ()
    """A prefix for the coordinator's command (`ip netns exec HOST`, in the multi-host tests)."""
    tls_cert: Path | None = None
    """`swarmhub serve --tls-cert`: serve HTTPS with this certificate (and `tls_key`); this process
    trusts exactly it. Peers need `--coordinator-ca` to trust it too."""
    tls_key: Path | None = None
    database_url: str | None = None
    heartbeat_timeout_s: float = 5.0
    heartbeat_interval_s: float | None = None
    """The coordinator's heartbeat interval (None: its default)."""
    frontend_dir: Path | None = None
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    coordinator: subprocess.Popen[bytes] | None = None
    peers: list[PeerProcess] = field(default_factory=list)
    token: str = ""
    join_command: str = ""
    """The last run's join command, exactly as the run page shows it (from the API)."""
    _client: httpx.Client | None = None

    @property
    def url(self) -> str:
        """Where this process reaches the coordinator."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"{'https' if self.tls_cert else 'http'}://{host}:{self.port}"

    def _verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=self.tls_cert) if self.tls_cert else True

    @property
    def client(self) -> httpx.Client:
        assert self._client is not None, "start() first"
        return self._client

    def __enter__(self) -> LocalSwarm:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SWARMHUB_DATABASE_URL"] = self.database_url or f"sqlite:///{self.workdir / 'swarmhub.sqlite'}"
        env["SWARMHUB_HEARTBEAT_TIMEOUT_S"] = str(self.heartbeat_timeout_s)
        if self.heartbeat_interval_s is not None:
            env["SWARMHUB_HEARTBEAT_INTERVAL_S"] = str(self.heartbeat_interval_s)
        env["SWARMHUB_CHECKPOINT_DIR"] = str(self.workdir / "checkpoints")
        env["SWARMHUB_DATASET_DIR"] = str(self.workdir / "datasets")
        env["SWARMHUB_PEER_PACKAGE_DIR"] = str(self.workdir / "peer-package")
        # Local peers share one cache: shards are content-addressed and written atomically.
        env.setdefault("SWARMHUB_PEER_DATA_DIR", str(self.workdir / "peer-data"))
        if self.frontend_dir is not None:
            env["SWARMHUB_FRONTEND_DIR"] = str(self.frontend_dir)
        env.setdefault("SWARMHUB_PEER_THREADS", "1")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self) -> None:
        self.port = self.port or free_port()
        subprocess.run(
            [console_script("swarmhub"), "create-admin", "--username", ADMIN_USERNAME, "--password-stdin"],
            input=self.admin_password.encode() + b"\n",
            env=self._env(),
            check=True,
            capture_output=True,
        )
        self.start_coordinator()
        self._client = httpx.Client(base_url=self.url, timeout=30, verify=self._verify())
        login = self._client.post(
            "/api/auth/login", json={"username": ADMIN_USERNAME, "password": self.admin_password}
        )
        login.raise_for_status()
        self._client.headers["Authorization"] = f"Bearer {login.json()['token']}"

    def start_coordinator(self, *, fault_point: str = "") -> None:
        """Start (or restart) the coordinator; `fault_point` (POINT@STEP) makes it die there, for tests."""
        env = self._env()
        if fault_point:
            env["SWARMHUB_FAULT_POINT"] = fault_point
        log = open(self.workdir / "coordinator.log", "ab")  # noqa: SIM115 - owned by the child process
        public = ["--public-url", self.public_url] if self.public_url else []
        tls = ["--tls-cert", str(self.tls_cert), "--tls-key", str(self.tls_key)] if self.tls_cert else []
        self.coordinator = subprocess.Popen(
            [
                *self.launcher,
                console_script("swarmhub"),
                "serve",
                "--host",
                self.host,
                "--port",
                str(self.port),
                *public,
                *tls,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.coordinator.poll() is not None:
                raise RuntimeError(f"coordinator exited:\n{(self.workdir / 'coordinator.log').read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1, verify=self._verify()).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("coordinator did not become healthy in time")

    def stop_coordinator(self, sig: int = signal.SIGTERM) -> None:
        if self.coordinator is not None and self.coordinator.poll() is None:
            self.coordinator.send_signal(sig)
            try:
                self.coordinator.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.coordinator.kill()
                self.coordinator.wait()

    def create_run(self, **params: Any) -> dict[str, Any]:
        params.setdefault("name", "local swarm")
        response = self.client.post("/api/runs", json=params)
        if response.status_code >= 400:
            raise RuntimeError(f"run rejected: {response.text}")
        run = response.json()
        issued = self.issue_token(run["id"], label="local")
        self.token = issued["token"]
        self.join_command = issued["join_command"]
        return run

    def issue_token(self, run_id: int, **body: Any) -> dict[str, Any]:
        """A new join token of the run (`verifier=True`: for the owner's own trusted peers)."""
        response = self.client.post(f"/api/runs/{run_id}/tokens", json=body)
        response.raise_for_status()
        issued: dict[str, Any] = response.json()
        return issued

    def start_peer(self, *options: str, token: str | None = None) -> PeerProcess:
        """A peer joining with the run's token (or `token`), with extra `swarmhub-peer join` options."""
        index = len(self.peers)
        log_path = self.workdir / f"peer-{index}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - owned by the child process
        process = subprocess.Popen(
            [
                console_script("swarmhub-peer"),
                "join",
                # The public URL when there is one: the coordinator then records this machine's
                # address on that route for these peers, which other machines can dial.
                self.public_url or self.url,
                "--token",
                token or self.token,
                "--name",
                f"local-{index}",
                *options,
            ],
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        peer = PeerProcess(index=index, process=process, log_path=log_path, options=list(options))
        self.peers.append(peer)
        return peer

    def steps(self, run_id: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while True:
            after = rows[-1]["step"] if rows else -1
            page = self.client.get(f"/api/runs/{run_id}/steps", params={"after": after, "limit": 500})
            page.raise_for_status()
            batch = page.json()
            rows.extend(batch)
            if len(batch) < 500:
                return rows

    def events(self, run_id: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while True:
            after = rows[-1]["id"] if rows else 0
            page = self.client.get(f"/api/runs/{run_id}/events", params={"after": after, "limit": 500})
            page.raise_for_status()
            batch = page.json()
            rows.extend(batch)
            if len(batch) < 500:
                return rows

    def peer_rows(self, run_id: int) -> list[dict[str, Any]]:
        response = self.client.get(f"/api/runs/{run_id}/peers")
        response.raise_for_status()
        return response.json()

    def _last_events(self, run_id: int, count: int = 20) -> str:
        try:
            events = self.events(run_id)[-count:]
        except httpx.HTTPError as exc:
            return f"(the coordinator did not answer: {exc})"
        return "\n".join(f"{e['created_at']} {e['kind']}: {e['message']}" for e in events)

    def logs(self) -> str:
        """The coordinator's log without request lines, and each peer's tail: for failure messages."""
        lines = (self.workdir / "coordinator.log").read_text(errors="replace").splitlines()
        coordinator = "\n".join(line for line in lines if '"GET /' not in line and '"POST /' not in line)
        parts = [f"--- coordinator ---\n{coordinator[-4000:]}"]
        parts += [f"--- peer {p.index} {p.options} ---\n{p.log()[-2500:]}" for p in self.peers]
        return f"logs in {self.workdir}\n" + "\n".join(parts)

    def metrics(self, run_id: int, name: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while True:
            after = rows[-1]["step"] if rows else -1
            page = self.client.get(
                f"/api/runs/{run_id}/metrics", params={"name": name, "after_step": after, "limit": 1000}
            )
            page.raise_for_status()
            batch = page.json()
            rows.extend(batch)
            if len(batch) < 1000:
                return rows

    def run_detail(self, run_id: int) -> dict[str, Any]:
        response = self.client.get(f"/api/runs/{run_id}")
        response.raise_for_status()
        return response.json()

    def wait_for_steps(self, run_id: int, count: int, timeout_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while True:
            steps = self.steps(run_id)
            if len(steps) >= count:
                return steps
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(steps)} of {count} steps after {timeout_s:.0f}s\n{self.logs()}\n"
                    f"--- the run's last events ---\n{self._last_events(run_id)}"
                )
            if self.peers and not any(p.alive() for p in self.peers):
                tail = "\n".join(p.log()[-2000:] for p in self.peers)
                raise RuntimeError(f"every peer exited after {len(steps)} steps:\n{tail}")
            time.sleep(0.5)

    def stop(self) -> None:
        for peer in self.peers:
            if peer.alive():
                peer.process.send_signal(signal.SIGTERM)
        for peer in self.peers:
            try:
                peer.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                peer.process.kill()
                peer.process.wait()
        if self._client is not None:
            self._client.close()
        self.stop_coordinator()
