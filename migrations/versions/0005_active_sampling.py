"""Active sampling (issue 24): a competition's sampling, its items' priorities and its policy's state

competitions.sampling: uniform (the paper's queue; every existing competition) or active;
competitions.annotator_reliability and settled: the annotators' accuracy and whether the ranking was
settled at the policy's last refresh (null and false so far). label_items.priority: the policy's value of
one more image of the item's pairs (1 until ranked, 0 parked), with the active queue's index.
active_policies: decided questions since the last refresh, and the last decision.

Columns are added and dropped in place (ALTER TABLE … ADD / DROP COLUMN, SQLite ≥ 3.35 included), not by
batch mode's copy of the table, which would lose the data-version triggers of revision 0001 on SQLite.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the columns (uniform sampling, priority 1 for every item so far), the index and the table."""
    op.add_column(
        "competitions", sa.Column("sampling", sa.String(length=16), nullable=False, server_default="uniform")
    )
    op.add_column("competitions", sa.Column("annotator_reliability", sa.Double(), nullable=True))
    op.add_column(
        "competitions", sa.Column("settled", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.add_column("label_items", sa.Column("priority", sa.Double(), nullable=False, server_default="1.0"))
    op.create_index(
        "ix_label_items_active_queue",
        "label_items",
        ["competition_id", "needed", sa.text("priority DESC"), "spread", "shuffle"],
    )
    op.create_table(
        "active_policies",
        sa.Column("competition_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("decided_since_refresh", sa.Integer(), nullable=False),
        sa.Column("informative_pairs", sa.JSON(), nullable=False),
        sa.Column("votes_used", sa.Integer(), nullable=False),
        sa.Column("full_design_votes", sa.Integer(), nullable=False),
        sa.Column("refreshed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_active_policies_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("competition_id", name=op.f("pk_active_policies")),
    )


def downgrade() -> None:
    """Drop the table, the index and the columns."""
    op.drop_table("active_policies")
    op.drop_index("ix_label_items_active_queue", table_name="label_items")
    op.drop_column("label_items", "priority")
    op.drop_column("competitions", "settled")
    op.drop_column("competitions", "annotator_reliability")
    op.drop_column("competitions", "sampling")
