"""Paid crowd studies: studies of a competition, the platform ids accounts are bound to, each participant's
arrival and outcome, and accounts that label only in the competitions they are members of.

users.member_competitions_only: false for every account so far (study participants' accounts are the first
to have it). The column is added and dropped in place (ALTER TABLE … ADD / DROP COLUMN), not by batch mode's
copy, which would delete the rows referencing users on SQLite.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the three tables and the accounts' flag (false)."""
    op.add_column(
        "users",
        sa.Column("member_competitions_only", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("participant_parameter", sa.String(length=64), nullable=False),
        sa.Column("study_parameter", sa.String(length=64), nullable=False),
        sa.Column("session_parameter", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("completion_url", sa.String(length=2000), nullable=False),
        sa.Column("completed_code", sa.String(length=64), nullable=False),
        sa.Column("no_work_left_code", sa.String(length=64), nullable=False),
        sa.Column("screened_out_code", sa.String(length=64), nullable=False),
        sa.Column("timed_out_code", sa.String(length=64), nullable=False),
        sa.Column("required_images", sa.Integer(), nullable=False),
        sa.Column("max_images", sa.Integer(), nullable=False),
        sa.Column("time_limit_minutes", sa.Integer(), nullable=False),
        sa.Column("max_participants", sa.Integer(), nullable=False),
        sa.Column("consent_text", sa.Text(), nullable=False),
        sa.Column("bonus_rule", sa.String(length=16), nullable=False),
        sa.Column("bonus_rate", sa.Numeric(precision=10, scale=4), nullable=False),
        sa.Column("is_open", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("bonus_rate >= 0", name=op.f("ck_studies_bonus_rate_not_negative")),
        sa.CheckConstraint(
            "max_images >= required_images", name=op.f("ck_studies_max_images_at_least_required")
        ),
        sa.CheckConstraint("max_participants >= 1", name=op.f("ck_studies_max_participants_positive")),
        sa.CheckConstraint("required_images >= 1", name=op.f("ck_studies_required_images_positive")),
        sa.CheckConstraint("time_limit_minutes >= 1", name=op.f("ck_studies_time_limit_positive")),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_studies_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_studies")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_studies_token_hash")),
    )
    op.create_index(op.f("ix_studies_competition_id"), "studies", ["competition_id"])
    op.create_table(
        "crowd_identities",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("participant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_crowd_identities_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crowd_identities")),
        sa.UniqueConstraint(
            "platform", "participant_id", name=op.f("uq_crowd_identities_platform_participant_id")
        ),
        sa.UniqueConstraint("user_id", name=op.f("uq_crowd_identities_user_id")),
    )
    op.create_table(
        "study_participants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("platform_study_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("arrived_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["studies.id"],
            name=op.f("fk_study_participants_study_id_studies"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_study_participants_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_study_participants")),
        sa.UniqueConstraint("study_id", "user_id", name=op.f("uq_study_participants_study_id_user_id")),
    )
    op.create_index("ix_study_participants_study_arrived", "study_participants", ["study_id", "arrived_at"])
    op.create_index(op.f("ix_study_participants_user_id"), "study_participants", ["user_id"])


def downgrade() -> None:
    """Drop the tables (every study, participant and platform id) and the accounts' flag."""
    op.drop_table("study_participants")
    op.drop_table("crowd_identities")
    op.drop_table("studies")
    op.drop_column("users", "member_competitions_only")
