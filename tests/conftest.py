"""Shared fixtures: `database_url` runs a test on SQLite and on PostgreSQL.

PostgreSQL comes from SWARMHUB_TEST_POSTGRES_URL (default: the local `test` database). Each test
session creates its own database there, so concurrent test runs never see each other's tables,
and every test starts from an empty schema. Without a server the PostgreSQL cases skip, unless
SWARMHUB_TEST_REQUIRE_ALL=1 (as in `make test`), which turns the skip into a failure
(`tests/required.py`, the one mechanism for every missing dependency).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# The Makefile installs the project editable; a bare `.venv/bin/pytest` on a fresh checkout does not.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.required import import_module, unavailable  # noqa: E402

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pytest_configure(config: pytest.Config) -> None:
    # Starlette asks for `httpx2` in its TestClient; the httpx it still supports is what we have.
    config.addinivalue_line(
        "filterwarnings", "ignore:Using `httpx` with `starlette.testclient` is deprecated:UserWarning"
    )


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """URL of a PostgreSQL database private to this test session."""
    sa = import_module("sqlalchemy", "install the server extra: pip install -e '.[server]'")
    server_url = sa.make_url(os.environ.get("SWARMHUB_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL))
    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    name = f"swarmhub_test_{uuid.uuid4().hex[:12]}"
    try:
        with engine.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        engine.dispose()
        unavailable(f"PostgreSQL at {server_url.render_as_string()} is unreachable: {exc.orig}")
    try:
        yield server_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


def _reset_postgres(url: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("DROP SCHEMA public CASCADE"))
            connection.execute(sa.text("CREATE SCHEMA public"))
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An empty database: a fresh SQLite file, or a PostgreSQL database with an empty schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'swarmhub.sqlite'}"
    url = request.getfixturevalue("postgres_database")
    _reset_postgres(url)
    return url
