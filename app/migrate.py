"""Run Alembic migrations from code, and tell whether a database is at the latest revision."""

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


def alembic_config(url: str | None = None, connection: Connection | None = None) -> Config:
    """Alembic's configuration for this project, aimed at a URL or an open connection."""
    config = Config(REPOSITORY_ROOT / "alembic.ini")
    config.set_main_option("script_location", str(REPOSITORY_ROOT / "migrations"))
    if url is not None:
        config.attributes["url"] = url
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at url up to revision."""
    command.upgrade(alembic_config(url), revision)


def head_revision() -> str:
    """The newest migration's revision id."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "migrations/versions holds the initial migration"
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at; None for an empty database."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


class DatabaseNotReady(RuntimeError):
    """The database has not been migrated to the latest revision."""


def check_current(engine: Engine) -> None:
    """Raise DatabaseNotReady, saying what to run, unless the database is at the newest revision."""
    try:
        current = current_revision(engine)
    except OperationalError as error:
        raise DatabaseNotReady(
            f"cannot open the database {engine.url.render_as_string()} ({error.orig}): "
            "check MAD_DATABASE_URL and MAD_DATA_DIR, then run `mad db upgrade`"
        ) from None
    head = head_revision()
    if current != head:
        state = "empty" if current is None else f"at revision {current}, the code expects {head}"
        raise DatabaseNotReady(
            f"the database ({engine.url.render_as_string()}) is {state}: run `mad db upgrade`"
        )
