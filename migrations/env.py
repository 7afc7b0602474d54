"""Alembic environment: migrates the database named by the settings, or a connection the caller passes."""

from alembic import context
from sqlalchemy import Connection

from app.db.engine import create_db_engine
from app.models import Base
from app.settings import Settings

target_metadata = Base.metadata


def run_migrations(connection: Connection) -> None:
    """Run the migrations on one connection; SQLite gets batch mode so ALTERs work."""
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Use the connection given in config.attributes, else connect to the configured database."""
    connection = context.config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    url = context.config.attributes.get("url") or Settings().sqlalchemy_url
    engine = create_db_engine(url)
    with engine.connect() as connection:
        run_migrations(connection)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("Offline (--sql) migrations are not supported: run them against a database.")
run_migrations_online()
