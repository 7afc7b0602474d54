"""`mad users`: add accounts, set passwords, deactivate accounts; issue, list and revoke API tokens."""

import typer
from rich.table import Table

from app.cli.common import console, database_session, fail, load_settings
from app.users.enums import Role

users_app = typer.Typer(
    help="Add admin, annotator and worker accounts; invite people; set passwords, deactivate accounts; "
    "issue, list and revoke API tokens.",
    no_args_is_help=True,
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
    from app.users import service

    if password is None and role != Role.worker:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    with database_session(load_settings()) as session:
        user = service.create_user(db_session=session, username=username, role=role, password=password)
        issued = service.create_api_token(db_session=session, user=user, name="cli") if token else None
    console.print(f"Created {role.value} [bold]{username}[/].")
    if issued:
        console.print(f"API token (shown once): [bold]{issued}[/]")


@users_app.command("invite")
def invite(
    role: Role = typer.Option(Role.annotator, help="The account's role: annotator or admin."),
    note: str = typer.Option("", help="Whom the link is for (shown in the admin page's list)."),
    hours: int = typer.Option(72, help="Hours the link stays valid (at most 30 days: 720)."),
    base_url: str = typer.Option(
        "http://127.0.0.1:8000", help="The address people reach this service at, for the link."
    ),
) -> None:
    """Print a one-time link with which a person sets their own username and password (only a hash of it
    is stored: it is shown once)."""
    from app.users import invitations

    with database_session(load_settings()) as session:
        invitation, token = invitations.create_invitation(
            db_session=session, role=role, note=note, valid_hours=hours, created_by=None
        )
        expires = invitation.expires_at
    console.print(f"Invitation for an {role.value}, valid until {expires:%Y-%m-%d %H:%M} UTC (shown once):")
    console.print(base_url.rstrip("/") + invitations.INVITATION_PATH.format(token=token), soft_wrap=True)


token_app = typer.Typer(
    help="Issue, list and revoke API tokens, one at a time (only a token's hash is stored).",
    no_args_is_help=True,
)
users_app.add_typer(token_app, name="token")

KEEP_TOKENS_HELP = "Keep the account's API tokens working (by default they are revoked)."


@token_app.command("add")
def issue_token(
    username: str = typer.Argument(..., help="Whose token."),
    name: str = typer.Option("cli", help="A label to tell tokens apart (shown by `mad users token list`)."),
) -> None:
    """Issue a new API token for an existing account and print it (it is shown once: only its hash is
    stored)."""
    from app.users import service

    with database_session(load_settings()) as session:
        user = service.get_user_by_name(db_session=session, username=username)
        issued = service.create_api_token(db_session=session, user=user, name=name)
    console.print(issued)


@token_app.command("list")
def list_tokens(
    username: str = typer.Argument(None, help="Whose tokens; every account's when omitted."),
) -> None:
    """Show API tokens: id (for `mad users token revoke`), account, name, when made and last used."""
    from app.users import service

    with database_session(load_settings()) as session:
        user = service.get_user_by_name(db_session=session, username=username) if username else None
        tokens = service.list_api_tokens(db_session=session, user=user)
        table = Table("id", "account", "name", "created (UTC)", "last used (UTC)")
        for token, owner in tokens:
            used = f"{token.last_used_at:%Y-%m-%d %H:%M}" if token.last_used_at else "never"
            table.add_row(str(token.id), owner, token.name, f"{token.created_at:%Y-%m-%d %H:%M}", used)
    if not tokens:
        console.print("No API tokens" + (f" of {username}." if username else "."))
        return
    console.print(table)


@token_app.command("revoke")
def revoke_token(
    token_id: int = typer.Argument(..., help="The token's id, from `mad users token list`."),
) -> None:
    """Revoke one API token: it works no more, the account's other tokens go on working."""
    from app.users import service

    with database_session(load_settings()) as session:
        token = service.revoke_api_token(db_session=session, token_id=token_id)
        owner = service.get_user(db_session=session, user_id=token.user_id).username
        console.print(f"Revoked token {token_id} ({token.name}) of [bold]{owner}[/].")


@users_app.command("password")
def set_password(
    username: str = typer.Argument(..., help="Whose password."),
    password: str = typer.Option(None, help="At least 8 characters; asked for interactively when omitted."),
    keep_tokens: bool = typer.Option(False, "--keep-tokens", help=KEEP_TOKENS_HELP),
) -> None:
    """Set a new password for an admin or annotator (when they forgot theirs, or it leaked); tell it to
    them. Their sessions end, and their API tokens are revoked unless --keep-tokens."""
    from app.users import service

    if password is None:
        password = typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    with database_session(load_settings()) as session:
        user = service.get_user_by_name(db_session=session, username=username)
        revoked = 0 if keep_tokens else len(service.list_api_tokens(db_session=session, user=user))
        service.set_password(db_session=session, user=user, password=password, keep_tokens=keep_tokens)
    console.print(f"New password set for [bold]{username}[/]{_revoked(revoked)}.")


@users_app.command("deactivate")
def deactivate(
    username: str = typer.Argument(..., help="Whose account."),
    keep_tokens: bool = typer.Option(False, "--keep-tokens", help=KEEP_TOKENS_HELP),
) -> None:
    """Stop an account: it can no longer sign in or label, its API tokens are revoked (kept with
    --keep-tokens, they work again once it is reactivated), and the images it was labelling go to others at
    once. `mad users reactivate` undoes it; its votes keep counting unless excluded."""
    from app.labelling.quality_control.annotators import deactivate as deactivate_account
    from app.users import service

    with database_session(load_settings()) as session:
        user = service.get_user_by_name(db_session=session, username=username)
        revoked = 0 if keep_tokens else len(service.list_api_tokens(db_session=session, user=user))
        deactivate_account(db_session=session, user=user, keep_tokens=keep_tokens)
    console.print(f"Deactivated [bold]{username}[/]{_revoked(revoked)}.")


@users_app.command("reactivate")
def reactivate(username: str = typer.Argument(..., help="Whose account.")) -> None:
    """Let a deactivated account sign in and use its tokens again."""
    from app.users import service

    with database_session(load_settings()) as session:
        user = service.get_user_by_name(db_session=session, username=username)
        service.set_active(db_session=session, user=user, is_active=True)
    console.print(f"Reactivated [bold]{username}[/].")


def _revoked(tokens: int) -> str:
    """How many API tokens were revoked, as the end of a sentence ("" for none)."""
    return f" and revoked their {tokens} API token{'s' if tokens != 1 else ''}" if tokens else ""


@users_app.command("list")
def list_users() -> None:
    """Show every account with its role and whether it is active."""
    from app.users import service

    with database_session(load_settings()) as session:
        users = service.list_users(db_session=session)
        table = Table("id", "username", "role", "active")
        for user in users:
            state = "yes" if user.is_active else "deactivated"
            table.add_row(str(user.id), user.username, user.role.value, state)
    if not users:
        fail("no accounts yet: add one with `mad users add NAME --role admin`")
    console.print(table)
