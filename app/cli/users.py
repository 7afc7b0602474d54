"""`mad users`: add accounts and issue API tokens."""

import typer
from rich.table import Table

from app.cli.common import console, database_session, fail, load_settings
from app.users import service
from app.users.models import Role

users_app = typer.Typer(
    help="Add admin, annotator and worker accounts; issue API tokens.", no_args_is_help=True
)


@users_app.command("add")
def add_user(
    username: str = typer.Argument(..., help="Login name (letters, digits, _ . @ -)."),
    role: Role = typer.Option(
        Role.annotator, help="admin: runs competitions; annotator: labels; worker: runs jobs."
    ),
    password: str = typer.Option(
        None, help="At least 8 characters; asked for interactively when omitted (not needed for workers)."
    ),
    token: bool = typer.Option(False, "--token", help="Also issue an API token and print it (once)."),
) -> None:
    """Create an account. Admins and annotators sign in with the password; scripts and workers use a token."""
    if password is None and role != Role.worker:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    with database_session(load_settings()) as session:
        user = service.create_user(db_session=session, username=username, role=role, password=password)
        issued = service.create_api_token(db_session=session, user=user, name="cli") if token else None
    console.print(f"Created {role.value} [bold]{username}[/].")
    if issued:
        console.print(f"API token (shown once): [bold]{issued}[/]")


@users_app.command("token")
def issue_token(
    username: str = typer.Argument(..., help="Whose token."),
    name: str = typer.Option("cli", help="A label to tell tokens apart."),
) -> None:
    """Issue a new API token for an existing account and print it (it is stored only as a hash)."""
    with database_session(load_settings()) as session:
        user = service.get_user_by_name(db_session=session, username=username)
        issued = service.create_api_token(db_session=session, user=user, name=name)
    console.print(issued)


@users_app.command("list")
def list_users() -> None:
    """Show every account with its role and whether it is active."""
    with database_session(load_settings()) as session:
        users = service.list_users(db_session=session)
        table = Table("id", "username", "role", "active")
        for user in users:
            table.add_row(str(user.id), user.username, user.role.value, "yes" if user.is_active else "paused")
    if not users:
        fail("no accounts yet: add one with `mad users add NAME --role admin`")
    console.print(table)
