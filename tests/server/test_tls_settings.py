"""The coordinator's TLS settings: both files or neither, https join URLs, Secure cookies."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from launch.cli import _parser, _settings, main
from swarmhub.settings import ServerSettings


def test_tls_needs_both_the_certificate_and_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValidationError, match="both tls_cert and tls_key"):
        ServerSettings(tls_key=Path("key.pem"))
    assert main(["serve", "--tls-cert", "cert.pem"]) == 2
    assert "give both tls_cert and tls_key (--tls-cert, --tls-key)" in capsys.readouterr().err


def test_serve_flags_set_tls_and_the_join_url_is_https(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWARMHUB_PUBLIC_URL", raising=False)
    args = _parser().parse_args(
        ["serve", "--host", "10.250.0.1", "--port", "8443", "--tls-cert", "c.pem", "--tls-key", "k.pem"]
    )
    settings = _settings(args)
    assert (settings.tls_cert, settings.tls_key) == (Path("c.pem"), Path("k.pem"))
    assert settings.join_url() == "https://10.250.0.1:8443"
    assert settings.secure_cookies
    assert not ServerSettings().secure_cookies


def test_session_cookies_are_secure_when_served_over_tls(settings: ServerSettings) -> None:
    from fastapi.testclient import TestClient

    from server.app import create_app
    from server.services.accounts import create_user

    app = create_app(settings.model_copy(update={"tls_cert": Path("c.pem"), "tls_key": Path("k.pem")}))
    with TestClient(app) as client:
        with app.state.session_factory() as session:
            create_user(session, username="tls", password="secure password", role="owner")
            session.commit()
        response = client.post("/api/auth/login", json={"username": "tls", "password": "secure password"})
        cookies = response.headers.get_list("set-cookie")
        assert len(cookies) == 2 and all("Secure" in cookie for cookie in cookies)
