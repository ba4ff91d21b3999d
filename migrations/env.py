"""Alembic environment: the URL comes from `server.db.alembic_config`, else alembic.ini, else settings."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from server.db import make_engine
from server.models import Base
from swarmhub.settings import ServerSettings

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = Base.metadata


def _database_url() -> str:
    return (
        config.attributes.get("database_url")
        or config.get_main_option("sqlalchemy.url")
        or ServerSettings().database_url
    )


def _configure(**kwargs) -> None:
    # Batch mode lets later revisions alter tables on SQLite, which has almost no ALTER TABLE.
    context.configure(target_metadata=target_metadata, render_as_batch=True, compare_type=True, **kwargs)


def run_migrations_offline() -> None:
    _configure(url=_database_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(_database_url())
    try:
        with engine.connect() as connection:
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
