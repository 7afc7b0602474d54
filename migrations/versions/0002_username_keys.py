"""Usernames are one without regard to case and Unicode form: users.username_key, uniquely indexed

Each account gets username_key, its name NFKC-normalised and case-folded (app.users.models.username_key,
copied here as it is today so that this revision never changes). Accounts whose names already collide (`Admin`
beside `admin`) and accounts other than the service's own worker named `local-worker` in some form are renamed
before the index is made: the oldest account of a colliding group keeps its name, each later one becomes NAME-
ID (its id; -2, -3 … after that while the name is still taken). Every rename is logged as a warning (shown by
`mad db upgrade`): tell those people their new username. Their passwords, tokens, votes and sessions stay.

SQLite cannot add a NOT NULL column without a default nor change one without rebuilding the table (which,
with foreign keys on, would cascade into every table referencing users), so the column is added with the
default '' and, on SQLite, keeps it; Postgres drops it once the rows are filled.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

import logging
import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LOCAL_WORKER = "local-worker"
"""The name of the service's own worker account (a worker), which no one else may hold in any form."""
MAX_USERNAME_LENGTH = 64
log = logging.getLogger("alembic.runtime.migration")

users = sa.table(
    "users",
    sa.column("id", sa.Integer),
    sa.column("username", sa.String),
    sa.column("username_key", sa.String),
    sa.column("role", sa.String),
)


def username_key(username: str) -> str:
    """The name NFKC-normalised, then case-folded."""
    return unicodedata.normalize("NFKC", username).casefold()


def upgrade() -> None:
    """Add users.username_key, rename colliding and reserved-name accounts, then index the key uniquely."""
    op.add_column(
        "users", sa.Column("username_key", sa.String(length=255), nullable=False, server_default="")
    )
    connection = op.get_bind()
    accounts = list(
        connection.execute(sa.select(users.c.id, users.c.username, users.c.role).order_by(users.c.id))
    )
    renamed = renames(accounts)
    for user_id, name, _ in accounts:
        username = renamed[user_id][1] if user_id in renamed else name
        connection.execute(
            users.update()
            .where(users.c.id == user_id)
            .values(username=username, username_key=username_key(username))
        )
    for user_id, (old, new) in renamed.items():
        log.warning(
            "Renamed account %d from %r to %r: its name was taken in another case or Unicode form (or is the "
            "service's own worker's); tell its owner their new username.",
            user_id,
            old,
            new,
        )
    if connection.dialect.name != "sqlite":
        op.alter_column("users", "username_key", server_default=None)
    op.create_index(op.f("ix_users_username_key"), "users", ["username_key"], unique=True)


def renames(accounts: list[tuple[int, str, str]]) -> dict[int, tuple[str, str]]:
    """{id: (old name, new name)} for the accounts (id, username, role; oldest first) that must give up
    their names: each later account of a group whose names share a key, and any account but the worker
    named exactly LOCAL_WORKER whose key is LOCAL_WORKER's."""
    taken = {username_key(name) for _, name, _ in accounts}
    kept: set[str] = set()
    renamed = {}
    for user_id, name, role in accounts:
        key = username_key(name)
        reserved = key == LOCAL_WORKER and not (name == LOCAL_WORKER and role == "worker")
        if key not in kept and not reserved:
            kept.add(key)
            continue
        new = free_name(name, user_id, taken)
        taken.add(username_key(new))
        renamed[user_id] = (name, new)
    return renamed


def free_name(name: str, user_id: int, taken: set[str]) -> str:
    """NAME-ID, else NAME-ID-2, NAME-ID-3 …: the first whose key no account has, cut to 64 characters."""
    suffix, attempt = f"-{user_id}", 1
    while True:
        candidate = name[: MAX_USERNAME_LENGTH - len(suffix)] + suffix
        if username_key(candidate) not in taken:
            return candidate
        attempt += 1
        suffix = f"-{user_id}-{attempt}"


def downgrade() -> None:
    """Drop users.username_key (renamed accounts keep their new names)."""
    op.drop_index(op.f("ix_users_username_key"), table_name="users")
    op.drop_column("users", "username_key")
