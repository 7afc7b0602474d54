"""The active policy rests between reruns: active_policies.resting_until

Null until a rerun has finished; after one that took t seconds, now + POLICY_REST × t
(app.labelling.active_sampling.policy). Added and dropped in place, as 0010 does.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the time (null: no rest owed)."""
    op.add_column("active_policies", sa.Column("resting_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop it: the policy then reruns whenever enough questions are decided."""
    op.drop_column("active_policies", "resting_until")
