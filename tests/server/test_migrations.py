"""Migrations build exactly the models' schema, and go down and up again with data in place."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from server.db import downgrade_database, make_engine, upgrade_database
from server.models import Base


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_from_empty_matches_the_models(database_url):
    upgrade_database(database_url)
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
            assert context.get_current_revision() is not None
    finally:
        engine.dispose()
    assert _tables(database_url) == set(Base.metadata.tables)


def test_upgrade_is_idempotent(database_url):
    upgrade_database(database_url)
    upgrade_database(database_url)


def test_downgrade_to_base_and_up_again_with_data(database_url):
    from server.db import make_session_factory
    from server.services.accounts import create_user

    upgrade_database(database_url)
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            create_user(session, username="keeper", password="long enough", role="admin")
            session.commit()
    finally:
        engine.dispose()
    downgrade_database(database_url, "base")
    assert _tables(database_url) == set()
    upgrade_database(database_url)
    assert _tables(database_url) == set(Base.metadata.tables)


def test_sqlite_parent_directory_is_created_and_pragmas_set(tmp_path):
    url = f"sqlite:///{tmp_path / 'nested' / 'dir' / 'db.sqlite'}"
    upgrade_database(url)
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()


def test_timestamps_come_back_in_utc(database_url):
    from datetime import UTC, datetime, timedelta, timezone

    from server.db import make_session_factory
    from server.models import User
    from server.services.accounts import create_user

    upgrade_database(database_url)
    engine = make_engine(database_url)
    try:
        factory = make_session_factory(engine)
        with factory() as session:
            user = create_user(session, username="tz", password="long enough", role="owner")
            user.created_at = datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
            session.commit()
        with factory() as session:
            created = session.scalars(sa.select(User.created_at)).one()
        assert created == datetime(2024, 5, 1, 10, 0, tzinfo=UTC) and created.tzinfo == UTC
    finally:
        engine.dispose()
