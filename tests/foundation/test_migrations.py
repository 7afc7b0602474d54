"""Alembic builds the whole schema from empty, matches the models exactly, and tears down to base."""

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from app.db.engine import create_db_engine
from app.migrate import alembic_config, check_current, head_revision
from app.models import Base


def test_upgrade_from_empty_has_no_drift_and_downgrades_to_base(database_factory):
    url = database_factory.empty_url()
    engine = create_db_engine(url)
    try:
        command.upgrade(alembic_config(url), "head")
        check_current(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={"compare_type": True, "render_as_batch": connection.dialect.name == "sqlite"},
            )
            assert compare_metadata(context, Base.metadata) == []
            assert set(inspect(connection).get_table_names()) == set(Base.metadata.tables) | {
                "alembic_version"
            }

        command.downgrade(alembic_config(url), "base")
        with engine.connect() as connection:
            assert set(inspect(connection).get_table_names()) == {"alembic_version"}
            assert MigrationContext.configure(connection).get_current_revision() is None

        command.upgrade(alembic_config(url), "head")
        with engine.connect() as connection:
            assert MigrationContext.configure(connection).get_current_revision() == head_revision()
    finally:
        engine.dispose()
