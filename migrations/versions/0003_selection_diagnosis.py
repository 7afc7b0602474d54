"""Selection that survives calibration: a competition's threshold rule, and each pair's selection diagnosis

competitions.threshold_rule: absolute (both top-1 probabilities ≥ T, the paper; every existing competition)
or quantile (each ≥ its classifier's own T-quantile). pair_subsets.diagnosis: the select job's counts of the
pair's disagreements and of those passing several thresholds (null for pairs selected before).

Both columns are added and dropped in place (ALTER TABLE … ADD / DROP COLUMN, SQLite ≥ 3.35 included), not by
batch mode's copy of the table, which would lose the data-version triggers of revision 0001 on SQLite.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the threshold rule (absolute for every competition so far) and the diagnosis (null so far)."""
    op.add_column(
        "competitions",
        sa.Column("threshold_rule", sa.String(length=16), nullable=False, server_default="absolute"),
    )
    op.add_column("pair_subsets", sa.Column("diagnosis", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop both columns."""
    op.drop_column("pair_subsets", "diagnosis")
    op.drop_column("competitions", "threshold_rule")
