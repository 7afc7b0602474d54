"""Engines for Postgres and SQLite, and sessions on them."""

import select
from collections.abc import Iterator

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from app.errors import InvalidInput


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
