"""Database engine, sessions and schema upgrades, for SQLite (the default) and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

import migrations

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


def _is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _ensure_sqlite_directory(url: str) -> None:
    database = make_url(url).database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _configure_sqlite(dbapi_connection, _record) -> None:
    # SQLite ignores foreign keys unless asked, per connection; WAL lets the dashboard read while
    # heartbeats write.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


def make_engine(url: str) -> Engine:
    if _is_sqlite(url):
        _ensure_sqlite_directory(url)
        # Requests run in a thread pool, so one connection may serve several threads in turn.
        engine = sa.create_engine(url, connect_args={"check_same_thread": False})
        sa.event.listen(engine, "connect", _configure_sqlite)
        return engine
    return sa.create_engine(url, pool_pre_ping=True)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    # Objects stay readable after commit, so a route can serialize what it just wrote.
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str) -> Config:
    """An Alembic config built in code, so upgrades work from an installed package and any CWD."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # The URL travels as an attribute rather than an ini option, whose '%' interpolation would
    # mangle escaped passwords.
    config.attributes["database_url"] = url
    return config


def upgrade_database(url: str, revision: str = "head") -> None:
    if _is_sqlite(url):
        _ensure_sqlite_directory(url)
    command.upgrade(alembic_config(url), revision)


def downgrade_database(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)
