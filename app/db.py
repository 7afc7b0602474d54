"""Database engine, declarative base and the request-scoped session."""

import select
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import psycopg
from fastapi import Depends, Request
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection, DateTime, Dialect, Engine, Enum, Executable, MetaData, create_engine, event
from sqlalchemy.engine import Compiled
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator
from starlette.concurrency import run_in_threadpool

from app.errors import InvalidInput

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores it naive, as UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        """Refuse naive datetimes; store UTC."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        """Read back as an aware UTC datetime."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base with constraint names Alembic can rely on."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime}


def str_enum(enum_class: type[StrEnum], length: int = 16) -> Enum:
    """A VARCHAR column holding the enum's values, read back as enum members."""
    return Enum(
        enum_class,
        native_enum=False,
        length=length,
        values_callable=lambda members: [member.value for member in members],
        validate_strings=True,
    )


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def create_db_engine(url: str, pool_size: int = 5, **kwargs) -> Engine:
    """An engine for Postgres or SQLite; SQLite gets WAL, foreign keys and write-serialising transactions.

    On both, a value no column can hold (an integer beyond 64 bits, text with a NUL character) is refused
    as InvalidInput before it reaches the driver, which would otherwise fail with a server error.
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False}, **kwargs)
        event.listen(engine, "connect", _configure_sqlite_connection)
        event.listen(engine, "begin", _begin_immediate)
    else:
        # No overflow: connections opened and closed per request under load cost more than waiting for one.
        engine = create_engine(url, pool_size=pool_size, max_overflow=0, **kwargs)
        event.listen(engine, "checkout", _refuse_closed_connection)
    event.listen(engine, "before_cursor_execute", _refuse_unstorable_values)
    return engine


def _refuse_closed_connection(dbapi_connection, _record, _proxy) -> None:
    """Discard a pooled Postgres connection that the server closed, or wrote to, while it sat idle (a
    restart, pg_terminate_backend): SQLAlchemy then takes another. A readable idle socket tells so at no
    cost, where SQLAlchemy's pre-ping spent a round trip on every checkout."""
    if dbapi_connection.closed or select.select([dbapi_connection.fileno()], [], [], 0)[0]:
        raise DisconnectionError("the database closed this connection while it was idle")


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _refuse_unstorable_values(_connection, _cursor, _statement, parameters, _context, _executemany) -> None:
    """The engine's check before every statement: refuse_unstorable(parameters)."""
    refuse_unstorable(parameters)


def refuse_unstorable(parameters) -> None:
    """InvalidInput for a bound integer outside 64 bits or a string holding NUL (no column can store them)."""
    for value in _bound_values(parameters):
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            raise InvalidInput(f"the number {value} is out of range (64-bit integers only)")
        if isinstance(value, str) and "\x00" in value:
            raise InvalidInput("text may not contain NUL characters")


def _bound_values(parameters) -> Iterator:
    """Every value of a statement's parameters: one row or many, each a mapping or a sequence."""
    for item in parameters.values() if isinstance(parameters, dict) else parameters or ():
        if isinstance(item, dict):
            yield from item.values()
        elif isinstance(item, tuple | list):
            yield from item
        else:
            yield item


class HotStatement:
    """A Core statement of a hot path (each labelling answer runs about a dozen), compiled once.

    On Postgres it runs straight on the session's psycopg connection, in the session's transaction:
    SQLAlchemy's work around an execution (execution context, result metadata, row objects) cost more
    CPU than these small indexed statements themselves, about 100 of 175 µs each. Its parameters are plain
    values that psycopg adapts as SQLAlchemy would (ints, strings, bools, aware datetimes); rows come back
    as named tuples; driver errors are raised as SQLAlchemy's, so they are answered as for any statement.
    On SQLite it runs through the session.
    """

    def __init__(self, statement: Executable):
        self.statement = statement
        self._postgres: tuple[Compiled, dict[str, Any]] | None = None

    def rows(self, db_session: Session, parameters: dict[str, Any]) -> list[Any]:
        """The rows of the statement (a SELECT, or a write with RETURNING) for these parameters."""
        with _driver(db_session) as connection:
            if connection is None:
                return db_session.execute(self.statement, parameters).all()
            refuse_unstorable(parameters)
            sql, values = self._postgres_sql(connection.dialect, parameters)
            cursor = connection.connection.dbapi_connection.cursor(row_factory=namedtuple_row)
            cursor.execute(sql, values)
            return cursor.fetchall()

    def write(self, db_session: Session, parameters: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Run a write with these parameters, or once per parameter set in a list; inside pipelined() it is
        only sent, with the pipeline's other writes."""
        with _driver(db_session) as connection:
            if connection is None:
                db_session.execute(self.statement, parameters)
                return
            refuse_unstorable(parameters)
            cursor = connection.connection.dbapi_connection.cursor()
            if isinstance(parameters, list):
                compiled, constants = self._compiled_for(connection.dialect)
                cursor.executemany(compiled.string, [{**constants, **one} for one in parameters])
            else:
                cursor.execute(*self._postgres_sql(connection.dialect, parameters))

    def _postgres_sql(self, dialect: Dialect, parameters: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The SQL and the values to run it with (IN lists expanded)."""
        compiled, constants = self._compiled_for(dialect)
        if compiled.post_compile_params:
            expanded = compiled.construct_expanded_state(parameters)
            return expanded.statement, expanded.parameters
        return compiled.string, {**constants, **parameters}

    def _compiled_for(self, dialect: Dialect) -> tuple[Compiled, dict[str, Any]]:
        """The statement compiled for Postgres, and the values of its own constant parameters."""
        if self._postgres is None:
            compiled = self.statement.compile(dialect=dialect)
            constants = {name: bind.value for bind, name in compiled.bind_names.items() if not bind.required}
            self._postgres = compiled, constants
        return self._postgres


@contextmanager
def pipelined(db_session: Session) -> Iterator[None]:
    """Send the HotStatement writes made inside in one round trip on Postgres (psycopg's pipeline mode),
    instead of waiting for each; an error of any of them is raised on leaving. Elsewhere, no change."""
    with _driver(db_session) as connection:
        if connection is None:
            yield
            return
        with connection.connection.dbapi_connection.pipeline():
            yield


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
        invalidated = connection.dialect.is_disconnect(error, dbapi_connection, None)
        if invalidated:
            connection.invalidate(error)
        raise DBAPIError.instance(
            None, None, error, psycopg.Error, connection_invalidated=invalidated, dialect=connection.dialect
        ) from error


def _configure_sqlite_connection(dbapi_connection, _record) -> None:
    """Let SQLAlchemy issue BEGIN itself (pysqlite's own is broken for savepoints) and tune SQLite."""
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    for pragma in (
        "PRAGMA journal_mode=WAL",
        "PRAGMA synchronous=NORMAL",
        "PRAGMA foreign_keys=ON",
        "PRAGMA busy_timeout=60000",
    ):
        cursor.execute(pragma)
    cursor.close()


def _begin_immediate(connection) -> None:
    """Take SQLite's write lock at BEGIN, so concurrent writers queue instead of failing mid-transaction."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def create_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded objects usable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False)


Chunk = TypeVar("Chunk")


async def through_database_gate(request: Request, chunks: Iterator[Chunk]) -> AsyncIterator[Chunk]:
    """A streamed response's chunks, each made in a thread once the database gate lets it in.

    Streamed exports read the database between chunks with sessions of their own; made in threads without
    passing the gate, forty of them waiting for connections could take every thread from the requests
    that hold the connections (see get_session).
    """
    end = object()
    while True:
        async with request.app.state.database_gate:
            chunk = await run_in_threadpool(next, chunks, end)
        if chunk is end:
            return
        yield chunk


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request, committed once when the endpoint returns (unless it committed already, as
    in_one_thread does), rolled back on error.

    The request first waits at the database gate: only as many requests use the database at once as it
    has connections (one on SQLite, the pool size on Postgres), the rest queue on the event loop before
    they take a thread. A request holds its connection between thread hops (dependencies, endpoint,
    commit); were more let in than there are connections, those waiting for a connection inside threads
    could take every thread and leave the holders none to commit in: a deadlock until the pool (or
    SQLite's busy) timeout. Making the session touches no database, so it needs no thread.
    """
    async with request.app.state.database_gate:
        session = request.app.state.sessionmaker()
        try:
            yield session
            if session.in_transaction():
                await run_in_threadpool(session.commit)
        except BaseException:
            if session.in_transaction():
                await run_in_threadpool(session.rollback)
            raise
        finally:
            session.close()


SessionDep = Annotated[Session, Depends(get_session, scope="function")]

Result = TypeVar("Result")


async def in_one_thread(db_session: Session, work: Callable[[], Result]) -> Result:
    """Run a request's database work and its one commit in a single worker thread.

    For the labelling hot path, from an async endpoint: a sync endpoint takes one thread hop for itself and
    another for get_session's commit, and on a busy two-core server each hop costs CPU and wait. An error
    rolls back in get_session.
    """

    def work_and_commit() -> Result:
        result = work()
        db_session.commit()
        return result

    return await run_in_threadpool(work_and_commit)
