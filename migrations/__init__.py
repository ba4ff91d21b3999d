"""Alembic migrations of the coordinator's database (run by `server.db.upgrade_database`)."""
