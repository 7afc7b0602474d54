"""What every CLI command shares: settings, a checked database session, and clear failures.

The CLI's modules import only typer, rich and the standard library at their top; each command imports the
domain it runs in its body, so that `mad --help`, every subcommand's help and argument errors answer at once
(SQLAlchemy, pydantic, numpy, scipy and torch load only for the command that needs them)."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.settings import Settings

console = Console()
error_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print an error that says what to do, unwrapped so paths and commands stay copyable, and exit."""
    error_console.print(f"[bold red]Error:[/] {message}", soft_wrap=True)
    raise typer.Exit(code)


def load_settings() -> "Settings":
    """The settings from the environment, or a clear error naming the bad variable."""
    from pydantic import ValidationError

    from app.settings import Settings

    try:
        return Settings()
    except ValidationError as error:
        problems = "; ".join(
            f"MAD_{'_'.join(str(part) for part in e['loc']).upper()}: {e['msg']}" if e["loc"] else e["msg"]
            for e in error.errors()
        )
        fail(f"invalid settings: {problems}")


@contextmanager
def database_session(settings: "Settings") -> Iterator["Session"]:
    """A session on the migrated database, committed on success; MadErrors become clean CLI errors."""
    from app.db.engine import create_db_engine, create_sessionmaker
    from app.errors import MadError
    from app.migrate import DatabaseNotReady, check_current

    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        check_current(engine)
        with create_sessionmaker(engine)() as session:
            try:
                yield session
                session.commit()
            except MadError as error:
                session.rollback()
                fail(error.message)
    except DatabaseNotReady as error:
        fail(str(error))
    finally:
        engine.dispose()
