"""Annotators in their own language: each account's chosen language, and class names per language.

users.locale: the language the person chose for the pages (null for every account so far: their browser's
Accept-Language decides). class_translations: a competition's class names and descriptions per language,
imported from a translation file. competitions.translations_version: raised by each import (0 so far), so
that labelling's per-process cache of class names is read again.

The columns are added and dropped in place (ALTER TABLE … ADD / DROP COLUMN), not by batch mode's copy,
which would delete the rows referencing users on SQLite and lose 0001's triggers on competitions.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the account's language (none chosen), the import counter (0) and the translations table."""
    op.add_column("users", sa.Column("locale", sa.String(length=16), nullable=True))
    op.add_column(
        "competitions",
        sa.Column("translations_version", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_table(
        "class_translations",
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("class_key", sa.String(length=255), nullable=False),
        sa.Column("locale", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_class_translations_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("competition_id", "class_key", "locale", name=op.f("pk_class_translations")),
    )


def downgrade() -> None:
    """Drop the table and both columns."""
    op.drop_table("class_translations")
    op.drop_column("competitions", "translations_version")
    op.drop_column("users", "locale")
