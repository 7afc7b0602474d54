"""Pair subsets S_ij with their reserve, the (image, class) questions, votes and difficulty flags,
and the labelling queue: one item per image with its leases.
"""

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.active import UNRANKED_PRIORITY
from app.db.base import Base, str_enum, utcnow


class PairSubset(Base):
    """The images selected for one classifier pair (i < j by id), paper Algorithm 1 line 10."""

    __tablename__ = "pair_subsets"
    __table_args__ = (UniqueConstraint("classifier_a_id", "classifier_b_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"), index=True)
    classifier_a_id: Mapped[int] = mapped_column(ForeignKey("classifiers.id", ondelete="CASCADE"))
    classifier_b_id: Mapped[int] = mapped_column(ForeignKey("classifiers.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    diagnosis: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """How the selection went (app/core/selection.py PairDiagnosis.as_dict); null for pairs selected before
    revision 0003 kept it."""


class PairImageRole(StrEnum):
    """Selected for labelling, held in reserve as a replacement, or discarded as too difficult."""

    selected = "selected"
    reserve = "reserve"
    discarded = "discarded"


class PairImage(Base):
    """One image of a pair's ordered list (selected first, then reserve) with both predictions."""

    __tablename__ = "pair_images"

    subset_id: Mapped[int] = mapped_column(
        ForeignKey("pair_subsets.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(primary_key=True)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="RESTRICT"), index=True)
    role: Mapped[PairImageRole] = mapped_column(str_enum(PairImageRole))
    distance: Mapped[float]
    label_a: Mapped[int]
    label_b: Mapped[int]
    prob_a: Mapped[float]
    prob_b: Mapped[float]
    below_threshold: Mapped[bool] = mapped_column(default=False)
    """Whether a `fill` selection took the image below T (app/core/selection.py); false for the others."""


class Question(Base):
    """ "Does this image contain a ⟨class⟩?" — asked once per (image, class), shared by every pair.

    yes_votes and no_votes count the votes that count (annotators whose votes are not excluded); a gold
    question has a known answer, which is also its outcome, and its votes only measure the annotators. An
    adjudicated question's outcome is an admin's (adjudication.py): recounts no longer change it.
    """

    __tablename__ = "questions"
    __table_args__ = (
        UniqueConstraint("competition_id", "image_id", "class_index"),
        Index("ix_questions_open", "competition_id", "outcome"),
        Index("ix_questions_gold", "competition_id", "gold_answer"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"))
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="RESTRICT"), index=True)
    class_index: Mapped[int]
    outcome: Mapped[bool | None]
    decided_at: Mapped[datetime | None]
    gold_answer: Mapped[bool | None]
    yes_votes: Mapped[int] = mapped_column(default=0)
    no_votes: Mapped[int] = mapped_column(default=0)
    early_evidence: Mapped[float | None] = mapped_column(default=0.0)
    """Σ of the counted votes' weights (Vote.weight) while every voter was vetted, null once one was not:
    the evidence an early decision under active sampling reads (app.core.active.decided_early)."""
    adjudicated: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Vote(Base):
    """One annotator's yes/no answer to one question, with the seconds it took.

    competition_id repeats the question's, so that an annotator's latest votes in a competition (read by the
    quality checks of every answer, and by undo) are one range of ix_votes_user_competition_created rather
    than a question lookup per vote."""

    __tablename__ = "votes"
    __table_args__ = (
        UniqueConstraint("question_id", "user_id"),
        Index("ix_votes_user_competition_created", "user_id", "competition_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"))
    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    answer: Mapped[bool]
    seconds: Mapped[float | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    weight: Mapped[float | None]
    """What the vote carried when cast under active sampling: the voter's log(r / (1 − r)) if vetted
    (AnnotatorReliability.weight), else null (as under uniform sampling)."""


class GoldAnswer(Base):
    """An annotator's first answer to a gold question, which alone scores them: undo takes back their vote
    (as on any question, so that undo does not tell gold apart), never this."""

    __tablename__ = "gold_answers"

    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    answer: Mapped[bool]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class FlagReason(StrEnum):
    """Why an annotator flagged an image: too difficult to judge, or not a natural photo (artificial data)."""

    too_difficult = "too_difficult"
    not_natural = "not_natural"


class DifficultyFlag(Base):
    """An annotator's verdict that an image is too difficult or not a natural photo (either counts towards
    discarding it)."""

    __tablename__ = "difficulty_flags"
    __table_args__ = (UniqueConstraint("competition_id", "image_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"))
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="RESTRICT"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    reason: Mapped[FlagReason] = mapped_column(str_enum(FlagReason), default=FlagReason.too_difficult)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class LabelItem(Base):
    """One image of the labelling queue, with the state that makes picking the next item one index scan.

    needed: the fewest further counted votes that could decide one of its open questions (0 when nothing is
    left to ask, or the image is discarded); it caps the concurrent leases and orders the queue (partly-voted
    images first). spread: the image's position in its pairs' selections, so every pair advances together.
    shuffle: a random tie-break fixed at creation. priority: under active sampling, the policy's value of
    one more image of its pairs, summed, at the last refresh (0: all its pairs settled, the item is parked;
    UNRANKED_PRIORITY, the lowest level, until a refresh ranks it; an item with needed 0 keeps its last).
    flags: counted difficulty flags. kept: an admin overturned its discard or its not-a-natural-photo flags,
    so flags no longer discard it.
    """

    __tablename__ = "label_items"
    __table_args__ = (
        UniqueConstraint("competition_id", "image_id"),
        Index("ix_label_items_queue", "competition_id", "needed", "spread", "shuffle"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"))
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="RESTRICT"), index=True)
    needed: Mapped[int] = mapped_column(default=0)
    spread: Mapped[int]
    shuffle: Mapped[int]
    priority: Mapped[float] = mapped_column(default=UNRANKED_PRIORITY)
    flags: Mapped[int] = mapped_column(default=0)
    discarded: Mapped[bool] = mapped_column(default=False)
    kept: Mapped[bool] = mapped_column(default=False)


Index(
    "ix_label_items_active_queue",
    LabelItem.competition_id,
    LabelItem.needed,
    LabelItem.priority.desc(),
    LabelItem.shuffle,
)
"""The active queue's order (app.labelling.statements.ACTIVE_QUEUE_HEAD), one index scan: within a priority
level at random, so that a pair that stops has labelled a fair sample of its images."""
Index("ix_label_items_floor", LabelItem.competition_id, LabelItem.needed, LabelItem.shuffle)
"""The uniform floor of the active queue's picks (ACTIVE_FLOOR_HEAD): at random among the unparked items."""


class AssignmentStatus(StrEnum):
    """An annotator's relation to an item: holding it under a lease, done with it, flagged it, or skipped
    it (no answer: offered to them again only once nothing else is left)."""

    leased = "leased"
    done = "done"
    flagged = "flagged"
    skipped = "skipped"


class Assignment(Base):
    """An item handed to an annotator: a lease until expires_at, then done (all answered), flagged or
    skipped (leased_at is then when)."""

    __tablename__ = "label_assignments"
    __table_args__ = (Index("ix_label_assignments_user_status", "user_id", "status"),)

    item_id: Mapped[int] = mapped_column(ForeignKey("label_items.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    status: Mapped[AssignmentStatus] = mapped_column(str_enum(AssignmentStatus))
    leased_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class UndoDepth(Base):
    """How many answers an annotator stands below their highest point in a competition (undo is capped)."""

    __tablename__ = "label_undo_depths"

    competition_id: Mapped[int] = mapped_column(
        ForeignKey("competitions.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    depth: Mapped[int] = mapped_column(default=0)


class QualityFlagKind(StrEnum):
    """Why an annotator was flagged: gold accuracy below the competition's threshold (they are paused in
    it), a streak of answers far faster than their own median, or a long run of one answer."""

    gold = "gold"
    fast = "fast"
    run = "run"


class QualityDecision(StrEnum):
    """An admin's decision on a flag: the annotator goes on (resumed), or their votes are excluded."""

    resumed = "resumed"
    excluded = "excluded"


class QualityFlag(Base):
    """A flag raised on an annotator's answers in a competition, open until an admin decides on it; an open
    gold flag pauses the annotator in that competition."""

    __tablename__ = "quality_flags"
    __table_args__ = (Index("ix_quality_flags_competition_user", "competition_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    kind: Mapped[QualityFlagKind] = mapped_column(str_enum(QualityFlagKind))
    detail: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    decision: Mapped[QualityDecision | None] = mapped_column(str_enum(QualityDecision))
    decided_at: Mapped[datetime | None]


class AdjudicationKind(StrEnum):
    """What an admin reviewed: a question decided by the narrowest majority (3–2 in a panel of 5), an image
    the panel discarded as too difficult, or an image flagged as not a natural photo."""

    split_decision = "split"  # not `split`, which would hide str.split
    discarded = "discarded"
    not_natural = "not_natural"


class Verdict(StrEnum):
    """The admin confirms the panel's outcome or overturns it."""

    confirmed = "confirmed"
    overturned = "overturned"


class Adjudication(Base):
    """An admin's verdict on a contested question or image, with the reason; an overturned split question
    takes the other outcome, an overturned discard or flag keeps the image in its pairs."""

    __tablename__ = "adjudications"

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"), index=True)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="RESTRICT"))
    question_id: Mapped[int | None] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"))
    kind: Mapped[AdjudicationKind] = mapped_column(str_enum(AdjudicationKind))
    verdict: Mapped[Verdict] = mapped_column(str_enum(Verdict))
    panel_outcome: Mapped[bool | None]
    outcome: Mapped[bool | None]
    reason: Mapped[str] = mapped_column(Text)
    decided_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ActivePolicy(Base):
    """A competition's active-sampling state: decided questions since the policy last ran, and its last
    decision (the pairs still worth asking as [a_id, b_id] best first, and the full design's votes then,
    app.labelling.active_sampling.policy; whether the ranking is settled is
    Competition.settled, which every labelling request reads)."""

    __tablename__ = "active_policies"

    competition_id: Mapped[int] = mapped_column(
        ForeignKey("competitions.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    decided_since_refresh: Mapped[int] = mapped_column(default=0)
    informative_pairs: Mapped[list[Any]] = mapped_column(JSON, default=list)
    full_design_votes: Mapped[int] = mapped_column(default=0)
    refreshed_at: Mapped[datetime | None]
    decided_yes: Mapped[int] = mapped_column(default=0)
    decided_regular: Mapped[int] = mapped_column(default=0)
    """Regular questions tallied (and how many "yes"): the base rate of "yes"."""
    expected_swaps: Mapped[float | None]
    """At the last refresh: the pairs of neighbours in the ranking that full MAD is expected to reverse
    (app.core.active.active_policy); null before the first."""
    resting_until: Mapped[datetime | None]
    """No rerun is due before this time, except for an annotator whose queue ran dry: after a rerun that took
    t seconds, POLICY_REST × t later (app.labelling.active_sampling.policy); null before the first."""


class UntalliedDecision(Base):
    """A regular question decided (or decided again) that the active policy has not yet tallied: written in
    the transaction that decides it, deleted by the tally that counts it
    (app.labelling.active_sampling.reliability.tally_decided), so that every decision is tallied once,
    whichever order the deciding transactions commit in. Questions decided since a time were not: a decision
    stamped before another's but committed after the tally that read the other was never tallied, nor any
    decision stamped by a server whose clock lagged. Written under either sampling, so that a switch to
    active finds every decision made before it."""

    __tablename__ = "untallied_decisions"

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"), index=True)
    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"), index=True)
    """Indexed for the foreign key: a reselection deletes questions (app.jobs.reselection)."""


class AnnotatorReliability(Base):
    """An annotator's reliability in a competition at the active policy's last refresh
    (app.core.reliability): accuracy, the evidence behind it (in direct observations' worth), whether they
    are vetted and the weight their vote then carries in an early decision, whether a partner agrees with
    them beyond their reliabilities (collusion), and their gold record (first answers)."""

    __tablename__ = "annotator_reliabilities"

    competition_id: Mapped[int] = mapped_column(
        ForeignKey("competitions.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    accuracy: Mapped[float]
    evidence: Mapped[float]
    vetted: Mapped[bool]
    weight: Mapped[float | None]
    colluding: Mapped[bool]
    gold_answered: Mapped[int]
    gold_right: Mapped[int]


class AnnotatorAgreement(Base):
    """Two annotators (user_a_id < user_b_id) in a competition: the decided questions on which both cast a
    vote no stopping rule chose (app.core.reliability.unbiased_votes), and on how many they agreed."""

    __tablename__ = "annotator_agreements"

    competition_id: Mapped[int] = mapped_column(
        ForeignKey("competitions.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    user_a_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    user_b_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    questions: Mapped[int]
    agreeing: Mapped[int]
