"""Statements of the hot paths, compiled once and run straight on psycopg on Postgres, and INSERTs that
take ON CONFLICT clauses on either database."""

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection, Dialect, Select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase

from app.db.engine import refuse_unstorable


class HotStatement:
    """A Core statement of a hot path (each labelling answer runs about a dozen), compiled once.

    On Postgres it runs straight on the session's psycopg connection, in the session's transaction:
    SQLAlchemy's work around an execution (execution context, result metadata, row objects) cost more
    CPU than these small indexed statements themselves, about 100 of 175 µs each. Its parameters are plain
    values that psycopg adapts as SQLAlchemy would (ints, strings, bools, aware datetimes); rows come back
    as named tuples; driver errors are raised as SQLAlchemy's, so they are answered as for any statement.
    On SQLite it runs through the session.
    """

    def __init__(self, statement: Select | UpdateBase):
        self.statement = statement
        self._postgres: tuple[SQLCompiler, dict[str, Any]] | None = None

    def rows(self, db_session: Session, parameters: dict[str, Any]) -> list[Any]:
        """The rows of the statement (a SELECT, or a write with RETURNING) for these parameters."""
        return self.rows_after_sync(db_session, parameters)()

    def rows_after_sync(self, db_session: Session, parameters: dict[str, Any]) -> Callable[[], list[Any]]:
        """Send the statement now and read its rows later: inside pipelined() it goes with the pipeline's
        writes, in their round trip, and its rows are read once the pipeline has ended."""
        with _driver(db_session) as connection:
            if connection is None:
                rows = list(db_session.execute(self.statement, parameters))
                return lambda: rows
            refuse_unstorable(parameters)
            cursor = _psycopg(connection).cursor(row_factory=namedtuple_row)
            cursor.execute(*self._postgres_sql(connection.dialect, parameters))
            return cursor.fetchall

    def write(self, db_session: Session, parameters: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Run a write with these parameters, or once per parameter set in a list; inside pipelined() it is
        only sent, with the pipeline's other writes."""
        with _driver(db_session) as connection:
            if connection is None:
                db_session.execute(self.statement, parameters)
                return
            refuse_unstorable(parameters)
            cursor = _psycopg(connection).cursor()
            if isinstance(parameters, list):
                compiled, constants = self._compiled_for(connection.dialect)
                cursor.executemany(compiled.string, [{**constants, **one} for one in parameters])
            else:
                cursor.execute(*self._postgres_sql(connection.dialect, parameters))

    def _postgres_sql(self, dialect: Dialect, parameters: dict[str, Any]) -> tuple[str, Mapping[str, Any]]:
        """The SQL and the values to run it with (IN lists expanded)."""
        compiled, constants = self._compiled_for(dialect)
        if compiled.post_compile_params:
            expanded = compiled.construct_expanded_state(parameters)
            return expanded.statement, expanded.parameters
        return compiled.string, {**constants, **parameters}

    def _compiled_for(self, dialect: Dialect) -> tuple[SQLCompiler, dict[str, Any]]:
        """The statement compiled for Postgres, and the values of its own constant parameters."""
        if self._postgres is None:
            compiled = self.statement.compile(dialect=dialect)
            constants = {name: bind.value for bind, name in compiled.bind_names.items() if not bind.required}
            self._postgres = compiled, constants
        return self._postgres


def conflict_insert(db_session: Session, table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT for this session's database that takes ON CONFLICT clauses (Postgres and SQLite)."""
    dialect = postgresql if db_session.get_bind().dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


@contextmanager
def pipelined(db_session: Session) -> Iterator[None]:
    """Send the HotStatement writes made inside in one round trip on Postgres (psycopg's pipeline mode),
    instead of waiting for each; an error of any of them is raised on leaving. Elsewhere, no change."""
    with _driver(db_session) as connection:
        if connection is None:
            yield
            return
        with _psycopg(connection).pipeline():
            yield


def _psycopg(connection: Connection) -> psycopg.Connection:
    """The psycopg connection under a Postgres connection of SQLAlchemy's."""
    return cast(psycopg.Connection, connection.connection.dbapi_connection)


@contextmanager
def _driver(db_session: Session) -> Iterator[Connection | None]:
    """The session's connection when it is a Postgres one (pending ORM changes flushed first), else None;
    a psycopg error raised inside comes out as SQLAlchemy's, the connection invalidated if it was lost."""
    connection = db_session.connection()
    if connection.dialect.name != "postgresql":
        yield None
        return
    if db_session.autoflush:
        db_session.flush()
    try:
        yield connection
    except psycopg.Error as error:
        dbapi_connection = connection.connection.dbapi_connection
        # SQLAlchemy types the error as its DB-API protocol's own Error class, which no driver's error is.
        invalidated = connection.dialect.is_disconnect(error, dbapi_connection, None)  # type: ignore[arg-type]
        if invalidated:
            connection.invalidate(error)
        raise DBAPIError.instance(
            None, None, error, psycopg.Error, connection_invalidated=invalidated, dialect=connection.dialect
        ) from error
