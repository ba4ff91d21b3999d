"""The coordinator's front door under attack: a real `swarmhub serve`, hammered over plain HTTP.

Phases, each while a prober times GET /healthz every 50 ms (is the coordinator still responsive?)
and the coordinator's resident memory (VmRSS) is sampled every 20 ms:

1. wrong logins: `--concurrency` clients, each from an address of its own (X-Forwarded-For), send
   wrong passwords as fast as answers come back for `--seconds` (and at least 8 each, past the free
   ones), half against the real admin account, half against made-up names; then the admin logs in
   from another address;
2. oversized bodies: clients POST `--oversize-mib` MiB bodies to /api/auth/login;
3. non-finite JSON: clients POST bodies with bare NaN / Infinity / 1e400.

    .venv/bin/python -m bench.front_door [--smoke] [--concurrency 16] [--seconds 10] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.report import RESULTS_DIR, print_table, write_results
from server.services.login_throttle import FREE_FAILURES

ADMIN = ("root", "a long enough admin password")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Coordinator:
    """`swarmhub serve` on a fresh SQLite database in a temporary directory."""

    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = os.environ | {
            "SWARMHUB_DATABASE_URL": f"sqlite:///{workdir / 'swarmhub.sqlite'}",
            "SWARMHUB_CHECKPOINT_DIR": str(workdir / "checkpoints"),
        }
        cli = [sys.executable, "-m", "launch.cli"]
        subprocess.run(
            [*cli, "create-admin", "--username", ADMIN[0], "--password-stdin"],
            input=ADMIN[1] + "\n",
            text=True,
            env=env,
            check=True,
            capture_output=True,
        )
        self.process = subprocess.Popen(
            [*cli, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        raise RuntimeError("the coordinator did not come up")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


class Watch:
    """Peak RSS of the coordinator and /healthz latency while a phase runs."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.stop = threading.Event()
        self.peak_rss = rss_bytes(coordinator.process.pid)
        self.health: list[float] = []
        self.health_failures = 0
        self.threads = [threading.Thread(target=self._rss), threading.Thread(target=self._probe)]

    def _rss(self) -> None:
        while not self.stop.wait(0.02):
            self.peak_rss = max(self.peak_rss, rss_bytes(self.coordinator.process.pid))

    def _probe(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.wait(0.05):
                started = time.monotonic()
                try:
                    ok = client.get(f"{self.coordinator.url}/healthz").status_code == 200
                except httpx.TransportError:
                    ok = False
                if ok:
                    self.health.append(time.monotonic() - started)
                else:
                    self.health_failures += 1

    def __enter__(self) -> Watch:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def result(self, statuses: Counter[int], requests: int, seconds: float) -> dict[str, Any]:
        ordered = sorted(self.health) or [float("nan")]
        return {
            "requests": requests,
            "requests_per_s": requests / seconds,
            "statuses": dict(sorted(statuses.items())),
            "peak_rss_mib": self.peak_rss / 2**20,
            "healthz_p50_ms": ordered[len(ordered) // 2] * 1e3,
            "healthz_max_ms": ordered[-1] * 1e3,
            "healthz_failures": self.health_failures,
        }


def hammer(
    coordinator: Coordinator, concurrency: int, seconds: float, request: Any, at_least: int = 0
) -> tuple[Counter[int], int, float]:
    """Each client sends for `seconds`, and until it has sent `at_least` requests."""
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client_loop(index: int) -> None:
        sent = 0
        with httpx.Client(base_url=coordinator.url, timeout=60) as client:
            while time.monotonic() < deadline or sent < at_least:
                sent += 1
                try:
                    code = request(client, index).status_code
                except httpx.TransportError:
                    code = 0
                with lock:
                    statuses[code] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses, sum(statuses.values()), time.monotonic() - started


def wrong_login(client: httpx.Client, index: int) -> httpx.Response:
    # Each client poses as an address of its own (the coordinator trusts X-Forwarded-For from
    # 127.0.0.1, as behind a local proxy), so the per-address backoff alone does not stop them.
    username = ADMIN[0] if index % 2 == 0 else f"nobody-{index}"
    return client.post(
        "/api/auth/login",
        json={"username": username, "password": "wrong password!"},
        headers={"X-Forwarded-For": f"10.0.0.{index + 1}"},
    )


def oversized(size: int) -> Any:
    body = b'{"username": "root", "password": "' + b"x" * size + b'"}'

    def send(client: httpx.Client, _index: int) -> httpx.Response:
        return client.post("/api/auth/login", content=body, headers={"content-type": "application/json"})

    return send


def non_finite(client: httpx.Client, index: int) -> httpx.Response:
    value = ("NaN", "Infinity", "-Infinity", "1e400")[index % 4]
    body = f'{{"username": {value}, "password": {value}}}'.encode()
    return client.post("/api/auth/login", content=body, headers={"content-type": "application/json"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--oversize-mib", type=int, default=64)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--smoke", action="store_true", help="4 clients, 1 s per phase, 2 MiB bodies")
    args = parser.parse_args(argv)
    if args.smoke:
        args.concurrency, args.seconds, args.oversize_mib = 4, 1.0, 2

    phases = {
        "wrong logins": wrong_login,
        f"{args.oversize_mib} MiB bodies": oversized(args.oversize_mib * 2**20),
        "NaN/Infinity bodies": non_finite,
    }
    # Enough wrong passwords from each address to pass its free ones, however slowly this machine hashes.
    at_least = {"wrong logins": FREE_FAILURES["pair"] + 3}
    results: dict[str, Any] = {"concurrency": args.concurrency, "seconds": args.seconds, "phases": {}}
    with tempfile.TemporaryDirectory() as workdir:
        coordinator = Coordinator(Path(workdir))
        try:
            results["idle_rss_mib"] = rss_bytes(coordinator.process.pid) / 2**20
            for name, request in phases.items():
                with Watch(coordinator) as watch:
                    statuses, requests, seconds = hammer(
                        coordinator, args.concurrency, args.seconds, request, at_least.get(name, 0)
                    )
                results["phases"][name] = watch.result(statuses, requests, seconds)
            with httpx.Client(base_url=coordinator.url, timeout=60) as client:
                results["admin_login_after_attack"] = client.post(
                    "/api/auth/login",
                    json={"username": ADMIN[0], "password": ADMIN[1]},
                    headers={"X-Forwarded-For": "10.9.9.9"},
                ).status_code
        finally:
            coordinator.stop()
    rows = [{"phase": name, **values} for name, values in results["phases"].items()]
    print(f"idle RSS: {results['idle_rss_mib']:.0f} MiB")
    print_table(rows, ["phase", "requests", "statuses", "peak_rss_mib", "healthz_p50_ms", "healthz_max_ms"])
    print(f"the real admin's login right after: HTTP {results['admin_login_after_attack']}")
    config = {k: v for k, v in results.items() if k != "phases"}
    write_results(
        "front_door_smoke" if args.smoke else "front_door", config=config, rows=rows, out_dir=args.out
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
