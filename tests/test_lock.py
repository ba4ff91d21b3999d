"""requirements.lock is in step with pyproject.toml, and the audit reads every pin of it.

pyproject.toml holds the ranges; `make lock` turns them into the lock that `make install` (and so
CI) installs with --require-hashes. A dependency added to pyproject.toml without `make lock` would
be missing from every install, since the project itself is installed with --no-deps.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
ENTRY = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([^\]]*)\])?==(\S+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)", re.M
)


def _entries() -> list[tuple[str, set[str], Version, int]]:
    """(canonical name, extras it is locked with, pinned version, number of hashes) of every entry."""
    return [
        (
            canonicalize_name(name),
            {canonicalize_name(extra) for extra in extras.split(",") if extra},
            Version(version),
            hashes.count("--hash="),
        )
        for name, extras, version, hashes in ENTRY.findall(LOCK.read_text())
    ]


def _locked() -> dict[str, tuple[Version, int]]:
    """Canonical name -> (pinned version, number of hashes) for every entry of the lock."""
    return {name: (version, hashes) for name, _, version, hashes in _entries()}


def _locked_extras() -> dict[str, set[str]]:
    """Canonical name -> the extras its entry is locked with (`uvicorn[standard]==` -> {"standard"})."""
    return {name: extras for name, extras, _, _ in _entries()}


def _direct_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [
        Requirement(spec)
        for spec in [*project["dependencies"], *extras["server"], *extras["peer"], *extras["dev"]]
    ]


def _audit_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_audit", ROOT / ".ci" / "audit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_direct_dependency_is_pinned_within_its_range() -> None:
    locked = _locked()
    for requirement in _direct_requirements():
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} is not in requirements.lock: run `make lock`"
        version, _ = locked[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name}=={version}, outside {requirement}: run `make lock`"
        )


def test_every_entry_is_an_exact_pin_with_hashes() -> None:
    text = LOCK.read_text()
    entries = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    locked = _locked()
    # An entry the pattern missed would be a line pip installs without a hash: --require-hashes refuses it.
    assert len(entries) == len(locked) > 50
    assert all(hashes >= 1 for _, hashes in locked.values())


def test_torch_is_the_cpu_build() -> None:
    # PyPI's torch of the same number is a CUDA build with gigabytes of nvidia-* dependencies.
    version, hashes = _locked()["torch"]
    assert version.local == "cpu" and hashes == 1
    assert not any(name.startswith("nvidia-") for name in _locked())


def test_the_audit_checks_every_pin_at_its_public_version() -> None:
    pins = dict(_audit_module().public_pins(LOCK.read_text()))
    locked = _locked()
    assert set(map(canonicalize_name, pins)) == set(locked)
    assert pins["torch"] == locked["torch"][0].public


def test_every_dependency_asked_for_with_extras_is_locked_with_them() -> None:
    # pip --require-hashes treats `cachecontrol[filecache]>=0.13.0` (pip-audit's) as a requirement of
    # its own: with the lock's entry a bare `cachecontrol==0.14.4`, a fresh venv's pip fetched the
    # newest cachecontrol and refused it as unpinned. `make lock` keeps the extras (--no-strip-extras).
    extras_locked = _locked_extras()
    missing = []
    for name, extras in extras_locked.items():
        for spec in importlib.metadata.distribution(name).requires or []:
            wanted = Requirement(spec)
            dependency = canonicalize_name(wanted.name)
            in_use = [{"extra": extra} for extra in sorted(extras) or [""]]
            applies = wanted.marker is None or any(wanted.marker.evaluate(env) for env in in_use)
            asked = {canonicalize_name(extra) for extra in wanted.extras}
            if applies and dependency in extras_locked and not asked <= extras_locked[dependency]:
                missing.append(
                    f"{name} needs {wanted}, the lock has {dependency}{sorted(extras_locked[dependency])}"
                )
    assert not missing, "; ".join(missing) + ": run `make lock`"
