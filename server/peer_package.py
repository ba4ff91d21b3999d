"""The peer package: a wheel of this coordinator's own code that participants install with one line.

A fresh machine has no SwarmHub; the run page shows `pip install "swarmhub[peer] @ <url>"` next to
the join command, the URL being this coordinator's `/downloads/<wheel>`. The wheel is built once,
on its first download, from the source tree (only what the package holds is staged in a temporary
directory, so the tree itself is never written to) and kept under `peer_package_dir`, named by a
hash of what went in. It is built from the tree as it is at that first download (normally the code
this coordinator runs) and kept for the rest of the process.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("swarmhub", "server", "peer", "launch", "migrations")
"""What pyproject.toml's packages.find includes; the built dashboard (server/static) stays out."""
PROJECT_FILES = ("pyproject.toml", "README.md")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "static")
CHECKOUT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 600


class PackageUnavailable(RuntimeError):
    """No source tree to build from, or the build failed."""


def find_source(configured: Path | None) -> Path | None:
    """The source tree: the one configured, the checkout this code runs from, or the current directory."""
    candidates = [configured] if configured is not None else [CHECKOUT, Path.cwd()]
    for root in candidates:
        if _is_swarmhub(root):
            return root
    return None


def _is_swarmhub(root: Path) -> bool:
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return False
    return project.get("name") == "swarmhub" and all((root / name).is_dir() for name in PACKAGES)


@dataclass(frozen=True)
class PackageInfo:
    version: str
    filename: str


def package_info(source: Path) -> PackageInfo:
    """The wheel's version and file name, read from the source's pyproject.toml (no build needed)."""
    version = str(tomllib.loads((source / "pyproject.toml").read_text())["project"]["version"])
    return PackageInfo(version=version, filename=f"swarmhub-{version}-py3-none-any.whl")


def install_command(download_url: str) -> str:
    """The line a participant runs on a fresh machine: the package with the peer's extra (torch pinned
    there), straight from the coordinator."""
    return f'pip install "swarmhub[peer] @ {download_url}"'


class PeerPackage:
    """Builds the wheel on first use (one build at a time) and hands out its path afterwards."""

    def __init__(self, source: Path | None, cache_dir: Path) -> None:
        self.source = source
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._built: Path | None = None

    def info(self) -> PackageInfo:
        if self.source is None:
            raise PackageUnavailable(
                "this coordinator has no SwarmHub source tree to build the peer package from "
                "(set SWARMHUB_PEER_PACKAGE_SOURCE)"
            )
        return package_info(self.source)

    def wheel(self) -> Path:
        """The wheel, built on the first call from the source as it is then (the code this process
        runs), or found under the cache directory if that content was built before."""
        info = self.info()
        assert self.source is not None
        with self._lock:
            if self._built is None or not self._built.is_file():
                self._built = self._build_or_find(self.source, info)
            return self._built

    def _build_or_find(self, source: Path, info: PackageInfo) -> Path:
        with tempfile.TemporaryDirectory(prefix="swarmhub-peer-package-") as scratch:
            staged = Path(scratch) / "src"
            _stage(source, staged)
            built = self._cache_dir / _content_hash(staged) / info.filename
            if built.is_file():
                return built
            out = Path(scratch) / "out"
            _build(staged, out)
            wheels = list(out.glob("swarmhub-*.whl"))
            if len(wheels) != 1:
                raise PackageUnavailable(f"the build left {len(wheels)} wheels, expected one")
            built.parent.mkdir(parents=True, exist_ok=True)
            partial = built.with_suffix(".partial")
            shutil.copyfile(wheels[0], partial)
            partial.replace(built)
            return built


def _stage(source: Path, staged: Path) -> None:
    staged.mkdir(parents=True)
    for name in PROJECT_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, staged / name)
    for name in PACKAGES:
        shutil.copytree(source / name, staged / name, ignore=SKIPPED)


def _content_hash(staged: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in staged.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(staged)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def _build(staged: Path, out: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--quiet",
        "--wheel-dir",
        str(out),
        str(staged),
    ]
    # With setuptools at hand the build needs no index (a coordinator may be offline).
    if importlib.util.find_spec("setuptools") is not None:
        command.append("--no-build-isolation")
    command.append(str(staged))
    result = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if result.returncode != 0:
        raise PackageUnavailable(
            f"building the peer package failed: {(result.stderr or result.stdout)[-2000:]}"
        )
