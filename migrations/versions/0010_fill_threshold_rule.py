"""Selection that fills k: each pair image says whether a `fill` selection took it below T

pair_images.below_threshold: false for every image selected so far (the absolute and quantile rules select
only images that pass). The column is added and dropped in place (ALTER TABLE … ADD / DROP COLUMN), not by
batch mode's copy, which would lose the data-version triggers of revision 0001 on SQLite.
competitions.threshold_rule, a VARCHAR, takes the new value `fill` as it is.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the mark (false: every image so far passed its pair's threshold)."""
    op.add_column(
        "pair_images", sa.Column("below_threshold", sa.Boolean(), nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    """Drop the mark; a competition under `fill` goes back to the paper's rule, which 0009 knows."""
    op.execute("UPDATE competitions SET threshold_rule = 'absolute' WHERE threshold_rule = 'fill'")
    op.drop_column("pair_images", "below_threshold")
