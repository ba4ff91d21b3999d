"""Audit the lock file's pins for known vulnerabilities with pip-audit and PyPI's advisory data.

Usage: python .ci/audit.py requirements.lock

PyPI's per-release JSON API (which carries each release's advisories) is not reachable from every
machine that runs CI. Where it is not, this says so and exits 0 without auditing, so that a build
does not fail for want of a network it was never given; set SWARMHUB_AUDIT_REQUIRED=1 where the
service is known to be reachable to make that a failure. Where it is reachable, any known
vulnerability, and any pin the service cannot account for (`--strict`), fails the build.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

# An entry may carry the extras a dependant asked for (`uvicorn[standard]==...`); the advisory is the
# package's own.
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s\\;]+)")
ADVISORY_API = "https://pypi.org/pypi/{name}/{version}/json"


def public_pins(lock_text: str) -> list[tuple[str, str]]:
    """(name, version) for every pin in the lock, versions without their local label.

    Advisories are published for public versions: the CPU build `torch==2.13.0+cpu` is torch
    2.13.0's source, and PyPI knows no release called `2.13.0+cpu`.
    """
    pins = []
    for line in lock_text.splitlines():
        match = PIN.match(line)
        if match:
            pins.append((match.group(1), match.group(2).split("+", 1)[0]))
    return pins


def unreachable_reason(name: str, version: str) -> str | None:
    """Why PyPI's advisory API cannot answer for a release it certainly has, or None if it can."""
    url = ADVISORY_API.format(name=name, version=version)
    try:
        response = httpx.get(url, timeout=15, follow_redirects=True)
    except httpx.HTTPError as exc:
        return f"{url}: {type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return f"{url}: HTTP {response.status_code}"
    try:
        has_advisories = "vulnerabilities" in response.json()
    except ValueError:
        has_advisories = False
    return None if has_advisories else f"{url}: no advisory data in the answer"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    lock = Path(argv[0])
    pins = public_pins(lock.read_text())
    if not pins:
        print(f"audit: no pins found in {lock}", file=sys.stderr)
        return 2
    # pip pins itself in the lock, and its release is on PyPI: a fair probe of the service.
    probe = next((pin for pin in pins if pin[0] == "pip"), pins[0])
    reason = unreachable_reason(*probe)
    if reason is not None:
        message = (
            f"audit SKIPPED: PyPI's advisory API is not reachable from this machine ({reason}); "
            f"{lock} was not audited for known vulnerabilities."
        )
        print(message, file=sys.stderr)
        return 1 if os.environ.get("SWARMHUB_AUDIT_REQUIRED") == "1" else 0
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="audit-") as pinned:
        pinned.write("".join(f"{name}=={version}\n" for name, version in pins))
        pinned.flush()
        command = [sys.executable, "-m", "pip_audit", "--requirement", pinned.name]
        command += ["--no-deps", "--disable-pip", "--strict", "--progress-spinner", "off"]
        return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
