"""`swarmhub create-admin` and the flags of `swarmhub serve`."""

from __future__ import annotations

import io

import pytest

from launch.cli import _parser, _settings, main


def _login_works(url: str, username: str, password: str) -> bool:
    from server.db import make_engine, make_session_factory
    from server.services.accounts import authenticate

    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            user = authenticate(session, username, password)
            return user is not None and user.role == "admin"
    finally:
        engine.dispose()


def test_create_admin_with_password_on_stdin(database_url, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("a long password\n"))
    code = main(["create-admin", "--username", "boss", "--password-stdin", "--database-url", database_url])
    assert code == 0 and "boss" in capsys.readouterr().out
    assert _login_works(database_url, "boss", "a long password")


def test_create_admin_refuses_duplicates_and_weak_passwords(database_url, capsys):
    args = ["create-admin", "--username", "boss", "--database-url", database_url]
    assert main([*args, "--password", "a long password"]) == 0
    assert main([*args, "--password", "another password"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert (
        main(["create-admin", "--username", "x", "--password", "short", "--database-url", database_url]) == 2
    )
    assert "password" in capsys.readouterr().err
    assert _login_works(database_url, "boss", "a long password")


def test_create_admin_reads_the_database_url_from_the_environment(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'env.sqlite'}"
    monkeypatch.setenv("SWARMHUB_DATABASE_URL", url)
    assert main(["create-admin", "--username", "envy", "--password", "a long password"]) == 0
    assert _login_works(url, "envy", "a long password")


def test_serve_flags_override_the_environment(monkeypatch):
    monkeypatch.setenv("SWARMHUB_PORT", "9000")
    monkeypatch.setenv("SWARMHUB_HOST", "10.0.0.1")
    settings = _settings(_parser().parse_args(["serve", "--port", "8123"]))
    assert (settings.host, settings.port) == ("10.0.0.1", 8123)


def test_demo_passes_its_arguments_through(monkeypatch):
    import sys
    import types

    seen = []
    fake = types.ModuleType("launch.demo")
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "launch.demo", fake)
    assert main(["demo", "--peers", "3", "--json"]) == 0
    assert seen == [["--peers", "3", "--json"]]


def test_a_command_is_required():
    with pytest.raises(SystemExit):
        main([])
