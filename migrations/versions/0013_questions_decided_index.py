"""An index of the questions by when they were decided: ix_questions_decided (competition_id, decided_at)

Every rerun of the active policy reads the questions decided since its last tally
(app.labelling.active_sampling.reliability.tally_decided); without the index that statement scanned every
question of the competition (27 ms at 100,000 questions, growing with them), with it 0.2 ms.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the index."""
    op.create_index("ix_questions_decided", "questions", ["competition_id", "decided_at"])


def downgrade() -> None:
    """Drop it."""
    op.drop_index("ix_questions_decided", table_name="questions")
