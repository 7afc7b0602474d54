"""The active policy no longer stores the votes used: active_policies.votes_used dropped

Every rerun counted every vote of the competition to store it, and nothing read it: the leaderboard counts
the votes used when it is asked (app.leaderboard.settling). The votes themselves stay.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("active_policies") as batch:
        batch.drop_column("votes_used")


def downgrade() -> None:
    """Add it back, 0 (the next rerun of a revision that writes it fills it)."""
    with op.batch_alter_table("active_policies") as batch:
        batch.add_column(sa.Column("votes_used", sa.Integer(), nullable=False, server_default="0"))
