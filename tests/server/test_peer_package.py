"""The peer package a fresh machine installs from the coordinator: the install line the run page shows,
and the wheel behind it (built from this source tree, with the peer's extra pinning torch)."""

from __future__ import annotations

import email
import tomllib
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
WHEEL = f"swarmhub-{VERSION}-py3-none-any.whl"


def test_the_install_line_names_the_wheel_on_the_coordinators_join_url(client):
    package = client.get("/api/peer-package").json()  # public: a fresh machine has no session
    url = f"http://127.0.0.1:8000/downloads/{WHEEL}"
    assert package == {
        "available": True,
        "detail": "",
        "version": VERSION,
        "url": url,
        "install_command": f'pip install "swarmhub[peer] @ {url}"',
    }


@pytest.mark.server_settings(public_url="https://swarm.example.org")
def test_the_install_line_follows_the_public_url(client):
    package = client.get("/api/peer-package").json()
    assert package["url"] == f"https://swarm.example.org/downloads/{WHEEL}"


def test_the_wheel_is_this_source_with_the_peer_extra_and_its_command(client):
    response = client.get(f"/downloads/{WHEEL}")
    assert response.status_code == 200, response.text
    wheel = zipfile.ZipFile(BytesIO(response.content))
    names = wheel.namelist()
    info = f"swarmhub-{VERSION}.dist-info"
    metadata = email.message_from_bytes(wheel.read(f"{info}/METADATA"))
    assert (metadata["Name"], metadata["Version"]) == ("swarmhub", VERSION)
    assert 'torch==2.13.0; extra == "peer"' in metadata.get_all("Requires-Dist")
    assert "swarmhub-peer = peer.cli:main" in wheel.read(f"{info}/entry_points.txt").decode()
    assert wheel.read("peer/console.py") == (ROOT / "peer" / "console.py").read_bytes()
    assert not any(name.startswith("server/static/") or "__pycache__" in name for name in names)
    # Built once per coordinator: the second download is the same file.
    assert client.get(f"/downloads/{WHEEL}").content == response.content


def test_other_downloads_are_404(client):
    response = client.get("/downloads/swarmhub-9.9.9-py3-none-any.whl")
    assert response.status_code == 404 and WHEEL in response.json()["detail"]


@pytest.mark.server_settings(peer_package_source=Path("/nonexistent"))
def test_without_a_source_tree_it_says_so(client):
    package = client.get("/api/peer-package").json()
    assert package["available"] is False and "SWARMHUB_PEER_PACKAGE_SOURCE" in package["detail"]
    assert client.get(f"/downloads/{WHEEL}").status_code == 404
