"""Seeds: a database's rows as JSON, kept per migration revision in tests/migrations/seeds/ (REVISION.json),
so that a later revision's upgrade is tested on data written by the schema before it (CONTRIBUTING.md).

The tables are read as the database has them (reflected), never through today's models, so a seed loads
into a database at its own revision whatever the models have become.

    .venv/bin/python -m tests.support.seeds DATABASE_URL > tests/migrations/seeds/REVISION.json
"""

import json
import sys
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, DateTime, MetaData, Numeric, Table, func, select, text

from app.db.engine import create_db_engine
from app.migrate import current_revision

DERIVED = frozenset({"alembic_version", "competition_versions"})
"""Tables written by Alembic and by triggers, not by the service: neither seeded nor compared."""

Rows = dict[str, list[dict[str, Any]]]


def tables(connection: Connection) -> list[Table]:
    """The database's tables as it has them, parents before children, derived ones left out."""
    metadata = MetaData()
    metadata.reflect(connection)
    return [table for table in metadata.sorted_tables if table.name not in DERIVED]


def rows(connection: Connection) -> Rows:
    """Every row of every table, by table name, each table in primary-key order."""
    return {
        table.name: [
            dict(row._mapping)
            for row in connection.execute(
                select(table).order_by(*(table.primary_key.columns or table.columns))
            )
        ]
        for table in tables(connection)
    }


def load(connection: Connection, seed: Rows) -> None:
    """Insert the seed's rows; on Postgres, move each id sequence past them, as the service's inserts do."""
    for table in tables(connection):
        if not seed.get(table.name):
            continue
        dates = {column.name for column in table.columns if isinstance(column.type, DateTime)}
        decimals = {column.name for column in table.columns if isinstance(column.type, Numeric)}
        connection.execute(
            table.insert(),
            [
                {name: _value(value, name in dates, name in decimals) for name, value in row.items()}
                for row in seed[table.name]
            ],
        )
        if connection.dialect.name == "postgresql":
            for column in table.primary_key.columns:
                sequence = connection.scalar(
                    text("SELECT pg_get_serial_sequence(:t, :c)"), {"t": table.name, "c": column.name}
                )
                if sequence is not None:
                    last = connection.scalar(select(func.max(column)))
                    connection.execute(
                        text("SELECT setval(CAST(:s AS regclass), :v)"), {"s": sequence, "v": last}
                    )


def _value(value: object, date: bool, decimal: bool) -> object:
    """A seed's value as its column takes it: a date (ISO text) as a datetime, a decimal (its text) as a
    Decimal, anything else as it is."""
    if date:
        return _date(value)  # type: ignore[arg-type]
    if decimal and value is not None:
        return Decimal(str(value))
    return value


def _date(value: str | None) -> datetime | None:
    """A seed's date (ISO text; UTC when it names no zone, as SQLite keeps them) as a datetime."""
    if value is None:
        return None
    date = datetime.fromisoformat(value)
    return date if date.tzinfo is not None else date.replace(tzinfo=UTC)


def dump(url: str) -> str:
    """The database's rows as a seed's JSON, with the revision it is at."""
    engine = create_db_engine(url)
    try:
        revision = current_revision(engine)
        with engine.connect() as connection:
            found = {name: table_rows for name, table_rows in rows(connection).items() if table_rows}
    finally:
        engine.dispose()
    return json.dumps({"revision": revision, "tables": found}, indent=1, default=_iso, sort_keys=True)


def _iso(value: object) -> str:
    """JSON for what json cannot write itself: dates as ISO text, decimals (money) as their exact text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"a seed cannot hold {value!r}")


if __name__ == "__main__":
    print(dump(sys.argv[1]))
