"""`mad db`: create or migrate the database schema."""

import typer

from app.cli.common import console, load_settings

db_app = typer.Typer(help="Create or migrate the database schema (Alembic migrations).", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head", help="Target revision; 'head' is the newest.")) -> None:
    """Migrate the database named by MAD_DATABASE_URL (default: SQLite in MAD_DATA_DIR) to REVISION."""
    from app.migrate import upgrade

    settings = load_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.sqlalchemy_url, revision)
    console.print(f"Database is at revision [bold]{revision}[/].")
