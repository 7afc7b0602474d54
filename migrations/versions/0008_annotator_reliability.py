"""Per-annotator reliability for active sampling (issue 33)

annotator_reliabilities: per competition and annotator, the accuracy, the evidence behind it, whether they
are vetted (their votes may decide a question early) and the weight log(r / (1 − r)) their vote then
carries, whether a partner agrees with them beyond their reliabilities (collusion), and their gold record.
annotator_agreements: per competition and pair of annotators, the questions on which both cast votes no
stopping rule chose, and how many of those they agreed on (tallied as questions are decided).
votes.weight: what the voter's vote carried when cast (null: not vetted, or uniform sampling).
questions.early_evidence: Σ of its counted votes' weights while every voter was vetted (null once one was
not): what an early decision reads. Existing questions with votes get null (their voters' weights were
never recorded), so they go on to a strict majority; those without votes 0.
competitions.yes_share replaces annotator_reliability (one reliability shared by every annotator, which two
accounts of one person could raise alone): the share of "yes" among decided questions, the base rate of the
early decisions' posterior. active_policies: what the tallies have counted so far, and the expected number
of neighbours full MAD would reverse at the last refresh. The active queue orders by priority and then at
random (shuffle), no longer by position in the pairs' lists, so that a stopped pair has labelled a fair
sample of its images: its index is rebuilt, and the uniform floor of its picks gets one (needed, shuffle).

Columns are added and dropped in place (ALTER TABLE … ADD / DROP COLUMN, SQLite ≥ 3.35 included), not by
batch mode's copy of the table, which would lose the data-version triggers of revision 0001 on SQLite.

Revision ID: 0008
Revises: 0006
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _competition_and_user(table: str, *users: str) -> list[sa.ForeignKeyConstraint]:
    """Foreign keys of a per-competition table to its competition and these user columns, in cascade."""
    keys = [
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f(f"fk_{table}_competition_id_competitions"),
            ondelete="CASCADE",
        )
    ]
    for column in users:
        keys.append(
            sa.ForeignKeyConstraint(
                [column], ["users.id"], name=op.f(f"fk_{table}_{column}_users"), ondelete="CASCADE"
            )
        )
    return keys


def upgrade() -> None:
    """Add the tables and columns, move the open questions' evidence, rebuild the active queue's index."""
    op.create_table(
        "annotator_reliabilities",
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("accuracy", sa.Double(), nullable=False),
        sa.Column("evidence", sa.Double(), nullable=False),
        sa.Column("vetted", sa.Boolean(), nullable=False),
        sa.Column("weight", sa.Double(), nullable=True),
        sa.Column("colluding", sa.Boolean(), nullable=False),
        sa.Column("gold_answered", sa.Integer(), nullable=False),
        sa.Column("gold_right", sa.Integer(), nullable=False),
        *_competition_and_user("annotator_reliabilities", "user_id"),
        sa.PrimaryKeyConstraint("competition_id", "user_id", name=op.f("pk_annotator_reliabilities")),
    )
    op.create_table(
        "annotator_agreements",
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("user_a_id", sa.Integer(), nullable=False),
        sa.Column("user_b_id", sa.Integer(), nullable=False),
        sa.Column("questions", sa.Integer(), nullable=False),
        sa.Column("agreeing", sa.Integer(), nullable=False),
        *_competition_and_user("annotator_agreements", "user_a_id", "user_b_id"),
        sa.PrimaryKeyConstraint(
            "competition_id", "user_a_id", "user_b_id", name=op.f("pk_annotator_agreements")
        ),
    )
    op.add_column("votes", sa.Column("weight", sa.Double(), nullable=True))
    op.add_column("questions", sa.Column("early_evidence", sa.Double(), nullable=True, server_default="0"))
    op.execute("UPDATE questions SET early_evidence = NULL WHERE yes_votes + no_votes > 0")
    op.add_column("competitions", sa.Column("yes_share", sa.Double(), nullable=True))
    op.drop_column("competitions", "annotator_reliability")
    op.add_column(
        "active_policies",
        sa.Column("tallied_through", sa.DateTime(timezone=True), nullable=True),
    )
    op.add_column(
        "active_policies", sa.Column("decided_yes", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column(
        "active_policies", sa.Column("decided_regular", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column("active_policies", sa.Column("expected_swaps", sa.Double(), nullable=True))
    op.drop_index("ix_label_items_active_queue", table_name="label_items")
    op.create_index(
        "ix_label_items_active_queue",
        "label_items",
        ["competition_id", "needed", sa.text("priority DESC"), "shuffle"],
    )
    op.create_index("ix_label_items_floor", "label_items", ["competition_id", "needed", "shuffle"])


def downgrade() -> None:
    """Drop what upgrade added; the shared reliability comes back empty (null: the prior's, until the next
    refresh)."""
    op.drop_index("ix_label_items_floor", table_name="label_items")
    op.drop_index("ix_label_items_active_queue", table_name="label_items")
    op.create_index(
        "ix_label_items_active_queue",
        "label_items",
        ["competition_id", "needed", sa.text("priority DESC"), "spread", "shuffle"],
    )
    op.drop_column("active_policies", "expected_swaps")
    op.drop_column("active_policies", "decided_regular")
    op.drop_column("active_policies", "decided_yes")
    op.drop_column("active_policies", "tallied_through")
    op.add_column("competitions", sa.Column("annotator_reliability", sa.Double(), nullable=True))
    op.drop_column("competitions", "yes_share")
    op.drop_column("questions", "early_evidence")
    op.drop_column("votes", "weight")
    op.drop_table("annotator_agreements")
    op.drop_table("annotator_reliabilities")
