"""A MAD competition: a label set with its taxonomy, an image corpus and the selection parameters."""

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, CheckConstraint, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.threshold_rule import ThresholdRule
from app.db.base import Base, str_enum, utcnow

MIN_SMOOTHING, MAX_SMOOTHING = 0.001, 1000.0
"""Bounds of the Laplace pseudo-count α: below, a_ij / a_ji overflows; above, every a_ij is about ½."""


class Sampling(StrEnum):
    """Which image the labelling queue hands out next (docs/architecture.md, The labelling queue)."""

    uniform = "uniform"
    """Every selected image to a panel majority, partly voted images first, then round-robin over the pairs:
    the paper's protocol."""
    active = "active"
    """The images of the pairs the policy of app/core/active.py ranks first, questions decided early by
    agreeing reliable votes, and nothing more once the ranking is settled (issue 24, Active MAD)."""


class Competition(Base):
    """One MAD competition (paper Algorithm 1) with its parameters k, T and its rule, label cap, panel and
    smoothing, and its quality control: the gold rate, and the gold accuracy below which an annotator is
    paused once they have answered gold_min_answers gold questions (0 never pauses)."""

    __tablename__ = "competitions"
    __table_args__ = (
        CheckConstraint("k >= 1", name="k_positive"),
        CheckConstraint("confidence_threshold >= 0 AND confidence_threshold <= 1", name="threshold_unit"),
        CheckConstraint("max_per_label >= 1", name="max_per_label_positive"),
        CheckConstraint("panel_size >= 1 AND panel_size % 2 = 1", name="panel_odd"),
        CheckConstraint(
            f"smoothing >= {MIN_SMOOTHING} AND smoothing <= {MAX_SMOOTHING}", name="smoothing_in_range"
        ),
        CheckConstraint("gold_rate >= 0 AND gold_rate < 1", name="gold_rate_unit"),
        CheckConstraint("gold_threshold >= 0 AND gold_threshold <= 1", name="gold_threshold_unit"),
        CheckConstraint("gold_min_answers >= 1", name="gold_min_answers_positive"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    guidelines: Mapped[str] = mapped_column(Text, default="")
    taxonomy: Mapped[str] = mapped_column(String(64))
    taxonomy_source: Mapped[str | None] = mapped_column(Text)
    class_keys: Mapped[list[Any]] = mapped_column(JSON)
    class_names: Mapped[list[Any]] = mapped_column(JSON)
    k: Mapped[int] = mapped_column(default=30)
    confidence_threshold: Mapped[float] = mapped_column(default=0.8)
    threshold_rule: Mapped[ThresholdRule] = mapped_column(
        str_enum(ThresholdRule), default=ThresholdRule.absolute
    )
    """absolute: both top-1 probabilities ≥ T (the paper); quantile: each ≥ its classifier's own T-quantile
    (app/core/selection.py)."""
    max_per_label: Mapped[int] = mapped_column(default=3)
    panel_size: Mapped[int] = mapped_column(default=5)
    smoothing: Mapped[float] = mapped_column(default=1.0)
    gold_rate: Mapped[float] = mapped_column(default=0.0)
    gold_threshold: Mapped[float] = mapped_column(default=0.0)
    gold_min_answers: Mapped[int] = mapped_column(default=10)
    members_only: Mapped[bool] = mapped_column(default=False)
    """Open to every annotator (False) or only to its members (CompetitionMember); admins label in all."""
    sampling: Mapped[Sampling] = mapped_column(str_enum(Sampling), default=Sampling.uniform)
    annotator_reliability: Mapped[float | None]
    """Under active sampling: the annotators' accuracy (app.core.active.reliability_from_pairs) at the last
    refresh of the policy, which decides questions early; null before the first."""
    settled: Mapped[bool] = mapped_column(default=False)
    """Under active sampling: the policy's last refresh found the ranking settled, so the queue offers
    nothing more (app.labelling.active_sampling.policy)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    translations_version: Mapped[int] = mapped_column(default=0)
    """Raised by each import of class-name translations (ClassTranslation): labelling keys its cached class
    names by it, so every process reads the new names on its next request."""


class ClassTranslation(Base):
    """A class's name and description in one language, imported for a competition's label set (a file of
    class id, locale, name, description); they take precedence over the taxonomy's own translations."""

    __tablename__ = "class_translations"

    competition_id: Mapped[int] = mapped_column(
        ForeignKey("competitions.id", ondelete="CASCADE"), primary_key=True
    )
    class_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    locale: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    description: Mapped[str] = mapped_column(Text, default="")


class CompetitionVersion(Base):
    """How often a competition's public results changed, counted per database connection that changed them.

    Triggers (migration 0001) add 1 in the transaction of every change to the rows the public reads come
    from: the competition, its classifiers, pair subsets and images, and its questions' votes and
    outcomes (on Postgres once per statement, per row for a vote's counts; on SQLite per row). The sum
    over writers is the competition's data version, which keys the public read cache
    (app/leaderboard/public_reads.py). One row per writer (the Postgres backend process; 0 on SQLite) keeps
    concurrent transactions off a shared row: each bumps its own, so none waits for another's commit or
    deadlocks with labelling's lock order, and a commit in any order still raises the sum. No foreign
    key: deleting a competition deletes its classifiers in cascade, whose triggers write here.
    """

    __tablename__ = "competition_versions"

    competition_id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    writer: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    version: Mapped[int] = mapped_column(BigInteger)


class CompetitionMember(Base):
    """An annotator who may label in a members-only competition."""

    __tablename__ = "competition_members"

    competition_id: Mapped[int] = mapped_column(
        ForeignKey("competitions.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    added_at: Mapped[datetime] = mapped_column(default=utcnow)
