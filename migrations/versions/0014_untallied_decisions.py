"""Decisions the active policy has not tallied: untallied_decisions, in place of a time watermark

The tally of the annotators' agreements read the questions decided after the newest decision time it had
read (active_policies.tallied_through). A decision's time is stamped before its transaction commits, by the
server that makes it: a decision stamped before another's but committed after the tally that read the other,
or stamped by a server whose clock lagged, was never tallied. Each decision now writes a row that the tally
deletes as it counts it (app.labelling.models.UntalliedDecision). The upgrade writes one for every regular
question decided after its competition's watermark (every one where the policy never ran) and drops the
watermark, and the index of the questions by decision time that only the tally read (0013).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DECIDED_REGULAR = "q.gold_answer IS NULL AND q.outcome IS NOT NULL AND q.decided_at IS NOT NULL"


def upgrade() -> None:
    """Create the table, fill it with the decisions after each watermark, drop the watermark and the index."""
    op.create_table(
        "untallied_decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("question_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_untallied_decisions_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["question_id"],
            ["questions.id"],
            name=op.f("fk_untallied_decisions_question_id_questions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_untallied_decisions")),
    )
    op.create_index("ix_untallied_decisions_competition_id", "untallied_decisions", ["competition_id"])
    op.create_index("ix_untallied_decisions_question_id", "untallied_decisions", ["question_id"])
    op.execute(
        "INSERT INTO untallied_decisions (competition_id, question_id) "
        "SELECT q.competition_id, q.id FROM questions q "
        "LEFT JOIN active_policies p ON p.competition_id = q.competition_id "
        f"WHERE {DECIDED_REGULAR} AND (p.tallied_through IS NULL OR q.decided_at > p.tallied_through) "
        "ORDER BY q.id"
    )
    with op.batch_alter_table("active_policies") as batch:
        batch.drop_column("tallied_through")
    op.drop_index("ix_questions_decided", table_name="questions")


def downgrade() -> None:
    """The index and the watermark back, each the newest decision time of its competition's tallied
    questions (an untallied decision stamped earlier is then not tallied, as before this revision), and the
    table dropped."""
    op.create_index("ix_questions_decided", "questions", ["competition_id", "decided_at"])
    with op.batch_alter_table("active_policies") as batch:
        batch.add_column(sa.Column("tallied_through", sa.DateTime(timezone=True), nullable=True))
    op.execute(
        "UPDATE active_policies SET tallied_through = ("
        "SELECT max(q.decided_at) FROM questions q "
        f"WHERE q.competition_id = active_policies.competition_id AND {DECIDED_REGULAR} "
        "AND NOT EXISTS (SELECT 1 FROM untallied_decisions u WHERE u.question_id = q.id))"
    )
    op.drop_index("ix_untallied_decisions_question_id", table_name="untallied_decisions")
    op.drop_index("ix_untallied_decisions_competition_id", table_name="untallied_decisions")
    op.drop_table("untallied_decisions")
