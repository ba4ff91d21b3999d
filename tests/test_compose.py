"""docker-compose.yml stays in step with the code: build files exist, commands and settings are real."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
import setuptools
import yaml

from launch.cli import _parser as coordinator_parser
from peer.cli import build_parser as peer_parser
from swarmhub.settings import PeerSettings, ServerSettings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
BUILT = {name: service for name, service in SERVICES.items() if "build" in service}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = set(PYPROJECT["project"]["scripts"])
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


def _argv(command: list[str] | str) -> list[str]:
    """The words a command runs, looking through `sh -c 'exec ...'` wrappers."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if argv[:2] == ["sh", "-c"]:
        argv = shlex.split(argv[2])
    if argv[:1] == ["exec"]:
        argv = argv[1:]
    return argv


def _program(command: list[str] | str) -> str:
    return _argv(command)[0]


PEERS = {name: s for name, s in BUILT.items() if _program(s["command"]) == "swarmhub-peer"}
PARSERS = {"swarmhub": coordinator_parser, "swarmhub-peer": peer_parser}


def test_expected_services():
    assert {"postgres", "coordinator"} <= set(SERVICES)
    assert SERVICES["postgres"]["image"].startswith("postgres:16")
    assert len(PEERS) >= 2, sorted(SERVICES)


@pytest.mark.parametrize("name", sorted(BUILT))
def test_commands_parse_with_the_real_command_lines(name, capsys):
    """Every subcommand and flag a service names exists (argparse exits on an unknown one)."""
    argv = _argv(BUILT[name]["command"])
    try:
        PARSERS[argv[0]]().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"{name}: {' '.join(argv)} does not parse: {capsys.readouterr().err}")


@pytest.mark.parametrize("name", sorted(PEERS))
def test_peers_announce_their_service_name_and_bound_port(name):
    """Other peers dial what a peer announces: on a compose network, its service name."""
    args = peer_parser().parse_args(_argv(PEERS[name]["command"])[1:])
    assert args.url == "http://coordinator:8000"
    assert args.listen_port is not None
    assert args.announce == f"{name}:{args.listen_port}"


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


def test_dockerfile_copies_every_packaged_package():
    """`pip install .` in the image packages only what was copied in; a package left out would
    install without error and fail at import time in the container."""
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    packaged = {
        name.split(".")[0]
        for name in setuptools.find_packages(ROOT / find.get("where", ["."])[0], include=find["include"])
    }
    assert {"swarmhub", "server", "peer", "launch", "migrations"} <= packaged
    dockerfile = (ROOT / "Dockerfile").read_text()
    # COPY lines from the build context (not `--from=` another stage): source -> destination.
    copied = {
        src.strip("/"): dst.strip("/")
        for src, dst in re.findall(r"^COPY\s+(?!--)(\S+)\s+(\S+)\s*$", dockerfile, re.MULTILINE)
    }
    missing = {name for name in packaged if copied.get(name) != name}
    assert not missing, f"the Dockerfile does not COPY {sorted(missing)} to where pyproject.toml packages it"


def test_coordinator_uses_the_postgres_service():
    url = SERVICES["coordinator"]["environment"]["SWARMHUB_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@postgres:" in url
    assert "postgres" in SERVICES["coordinator"]["depends_on"]
