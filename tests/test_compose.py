"""docker-compose.yml stays in step with the code: build files exist, commands and settings are real."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from swarmhub.settings import PeerSettings, ServerSettings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
BUILT = {name: service for name, service in SERVICES.items() if "build" in service}
SCRIPTS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
IMAGE_BINARIES = {"python", "sh"}


def _prefixed_names(settings: type, prefix: str) -> set[str]:
    return {prefix + name.upper() for name in settings.model_fields}


SETTING_NAMES = _prefixed_names(ServerSettings, "SWARMHUB_") | _prefixed_names(PeerSettings, "SWARMHUB_PEER_")


def _build(service: dict) -> tuple[Path, Path]:
    build = service["build"]
    if isinstance(build, str):
        return ROOT / build, ROOT / build / "Dockerfile"
    context = ROOT / build.get("context", ".")
    return context, context / build.get("dockerfile", "Dockerfile")


def _program(command: list[str] | str) -> str:
    """The executable a command runs, looking through `sh -c 'exec ...'` wrappers."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if argv[:2] == ["sh", "-c"]:
        argv = shlex.split(argv[2])
    if argv[:1] == ["exec"]:
        argv = argv[1:]
    return argv[0]


def test_expected_services():
    assert {"postgres", "coordinator", "peer"} <= set(SERVICES)
    assert SERVICES["postgres"]["image"].startswith("postgres:16")
    assert SERVICES["peer"]["deploy"]["replicas"] >= 2


@pytest.mark.parametrize("name", sorted(BUILT))
def test_build_context_and_dockerfile_exist(name):
    context, dockerfile = _build(BUILT[name])
    assert context.is_dir() and dockerfile.is_file()


@pytest.mark.parametrize("name", sorted(BUILT))
def test_commands_run_declared_console_scripts(name):
    assert _program(BUILT[name]["command"]) in SCRIPTS


@pytest.mark.parametrize("name", sorted(BUILT))
def test_environment_names_are_real_settings(name):
    environment = BUILT[name].get("environment", {})
    names = set(environment) if isinstance(environment, dict) else {e.split("=", 1)[0] for e in environment}
    assert names <= SETTING_NAMES, names - SETTING_NAMES


def test_healthchecks_use_binaries_the_images_have():
    for name, service in BUILT.items():
        test = service.get("healthcheck", {}).get("test")
        if test:
            assert test[0] == "CMD" and test[1] in IMAGE_BINARIES, name


def test_dockerfile_default_command_is_a_console_script():
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = re.findall(r"^CMD\s+(\[.*\])\s*$", dockerfile, re.MULTILINE)[-1]
    assert yaml.safe_load(cmd)[0] in SCRIPTS


def test_coordinator_uses_the_postgres_service():
    url = SERVICES["coordinator"]["environment"]["SWARMHUB_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@postgres:" in url
    assert "postgres" in SERVICES["coordinator"]["depends_on"]
