"""The dashboard's committed schemas and generated TypeScript must match the current server code.

`make generate` writes frontend/schema/ (the OpenAPI document of `create_app()` and the JSON schema
of the feed frames) and turns them into frontend/src/generated/. This test runs the same two steps
into a temporary folder and names every committed file that differs from the fresh generation,
so a change to server/schemas.py or a route that was not followed by `make generate` fails here.
Needs node and frontend/node_modules (`make frontend`); no browser, so it runs in every `pytest`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"
GENERATED = ("schema", "src/generated")
"""Folders of frontend/ that `make generate` owns entirely."""
GENERATOR_PACKAGES = ("openapi-typescript", "json-schema-to-typescript", "openapi-fetch")


def _require_node() -> None:
    missing = [p for p in GENERATOR_PACKAGES if not (FRONTEND / "node_modules" / p).is_dir()]
    if shutil.which("npm") is None or shutil.which("node") is None or missing:
        message = f"needs node, npm and frontend/node_modules (`make frontend`); missing: {missing or 'npm'}"
        if os.environ.get("SWARMHUB_TEST_REQUIRE_ALL") == "1":
            pytest.fail(message)
        pytest.skip(message)


def _files(root: Path) -> dict[str, Path]:
    return {
        str(path.relative_to(root)): path
        for folder in GENERATED
        if (root / folder).is_dir()
        for path in sorted((root / folder).rglob("*"))
        if path.is_file()
    }


def _run(command: list[str], cwd: Path) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        f"{' '.join(command)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    )


def test_committed_generated_files_match_a_fresh_generation(tmp_path: Path) -> None:
    _require_node()
    fresh = tmp_path / "frontend"
    _run([sys.executable, str(FRONTEND / "scripts" / "export_schemas.py"), str(fresh / "schema")], FRONTEND)
    _run(
        ["npm", "run", "--silent", "generate", "--", str(fresh / "schema"), str(fresh / "src" / "generated")],
        FRONTEND,
    )
    committed, expected = _files(FRONTEND), _files(fresh)
    assert expected, "the generator wrote nothing"
    problems = [
        f"frontend/{name}: not generated any more; delete it" for name in committed.keys() - expected.keys()
    ]
    problems += [f"frontend/{name}: missing; commit it" for name in expected.keys() - committed.keys()]
    first_diff = ""
    for name in sorted(committed.keys() & expected.keys()):
        old, new = committed[name].read_text(), expected[name].read_text()
        if old != new:
            problems.append(f"frontend/{name}: differs from a fresh generation")
            first_diff = first_diff or "".join(
                list(difflib.unified_diff(old.splitlines(True), new.splitlines(True), name, "fresh"))[:40]
            )
    assert not problems, (
        "run `make generate` and commit the result:\n" + "\n".join(problems) + "\n" + first_diff
    )


def _hand_written_sources() -> list[Path]:
    src = FRONTEND / "src"
    return [p for p in src.rglob("*.ts*") if (src / "generated") not in p.parents]


def test_no_hand_written_copy_of_a_generated_model() -> None:
    """Pages import the server's models from src/generated/, never redeclare them."""
    names = set(json.loads((FRONTEND / "schema" / "openapi.json").read_text())["components"]["schemas"])
    names |= set(json.loads((FRONTEND / "schema" / "feed.json").read_text())["$defs"])
    declaration = re.compile(r"\b(?:interface|type)\s+(" + "|".join(sorted(names)) + r")\b")
    copies = [
        f"{path.relative_to(FRONTEND)}: declares {match.group(1)}"
        for path in _hand_written_sources()
        for match in declaration.finditer(path.read_text())
    ]
    assert not copies, "\n".join(copies)


def test_the_dashboard_takes_presets_from_the_api_not_a_copy() -> None:
    """Presets come from GET /api/presets; a hand-kept table would drift from swarmhub/presets.py."""
    assert not (FRONTEND / "src" / "presets.ts").exists()
    form = (FRONTEND / "src" / "pages" / "CreateRunPage.tsx").read_text()
    assert '"/api/presets"' in form


def test_the_run_form_takes_defaults_and_bounds_from_run_settings() -> None:
    """The form's defaults and bounds come from generated/run-settings.ts (RunCreate in the OpenAPI
    document), which the regeneration above keeps equal to swarmhub/run_settings.py."""
    settings = (FRONTEND / "src" / "generated" / "run-settings.ts").read_text()
    run_create = json.loads((FRONTEND / "schema" / "openapi.json").read_text())["components"]["schemas"][
        "RunCreate"
    ]
    assert all(f'"{name}": {{' in settings for name in run_create["properties"])
    validation = (FRONTEND / "src" / "validation.ts").read_text()
    assert 'from "./generated/run-settings"' in validation
    hand_kept = re.findall(r'^\s*(\w+): "[^"]*",$', validation, re.MULTILINE)
    assert not hand_kept, f"validation.ts spells out form values by hand: {hand_kept}"
