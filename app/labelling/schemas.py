"""Request and response bodies of the labelling API; none of them ever names a classifier."""

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.competitions.models import Sampling
from app.images.store import SHA256_PATTERN
from app.labelling.annotating.questions import question_text
from app.labelling.models import AdjudicationKind, FlagReason, QualityDecision, QualityFlagKind, Verdict
from app.labelling.quality_control.quality import FlagView
from app.labelling.quality_control.work_records import ACTIVE_SECONDS_CAP, WorkRecord
from app.labelling.types import AnnotatorStats, NextItemStatus, PresentedItem, PresentedQuestion


class QuestionRead(BaseModel):
    """One yes/no question on the image, by class name only, with what the class means."""

    question_id: int
    class_name: str = Field(examples=["fountain"])
    text: str = Field(examples=["Does this image contain a fountain?"])
    language: str = Field(
        examples=["en"],
        description="The language of the question and class name: the caller's (their account's setting, "
        "else Accept-Language) when the class has a name in it, else `en`.",
    )
    definition: str = Field(
        examples=["a structure from which an artificially produced jet of water arises"],
        description="What the class means: its WordNet gloss, or the taxonomy file's description; empty "
        "when the taxonomy gives none.",
    )

    @classmethod
    def of(cls, question: PresentedQuestion) -> "QuestionRead":
        """The API view of a presented question."""
        return cls(
            question_id=question.question_id,
            class_name=question.class_name,
            text=question_text(question.class_name, question.language),
            language=question.language,
            definition=question.definition,
        )


class ItemRead(BaseModel):
    """An image leased to the caller with the questions they still have to answer on it, in random order."""

    item_id: int
    image_url: str = Field(description="The full-size image (immutable, cacheable).")
    width: int
    height: int
    questions: list[QuestionRead]
    lease_expires_at: datetime = Field(
        description="Until then no one else takes the caller's place on this image; answering later still "
        "counts if the questions are still open."
    )

    @classmethod
    def of(cls, item: PresentedItem) -> "ItemRead":
        """The API view of a presented item."""
        return cls(
            item_id=item.item_id,
            image_url=f"/images/{item.image_sha256}",
            width=item.width,
            height=item.height,
            questions=[QuestionRead.of(question) for question in item.questions],
            lease_expires_at=item.lease_expires_at,
        )


class NextItemRead(BaseModel):
    """The next item, or why there is none."""

    status: NextItemStatus = Field(
        description="`item`: here it is; `busy`: the rest is leased to others; `skipped`: only images the "
        "caller skipped are left (POST …/next offers them again); `finished`: nothing is left for the "
        "caller; `settled`: the competition samples actively and its ranking is settled, so nothing "
        "useful is left to label (an admin may switch it to uniform sampling to go on to the full design)."
    )
    item: ItemRead | None


class AnswerCreate(BaseModel):
    """The caller's answer to one question, with the seconds they took."""

    question_id: int
    answer: bool = Field(description="True: yes, the image contains this class.")
    seconds: float | None = Field(
        default=None,
        ge=0,
        le=86_400,
        description="Time taken to answer, as the client measured it. The server's clock bounds it: the "
        "answers of one submission are credited at most the time since the image was handed out (or since "
        "the last answer on it), shared in proportion to these seconds; left out, an equal share.",
    )


class AnswersCreate(BaseModel):
    """Answers to questions of one image."""

    answers: list[AnswerCreate] = Field(min_length=1, max_length=50)
    next: bool = Field(
        default=False,
        description="Also lease the next image and return it, as POST …/next would (one round "
        "trip per image instead of two).",
    )


class AnswersRead(BaseModel):
    """What was stored; questions decided by others meanwhile are listed and not stored."""

    recorded: int
    already_decided: list[int]
    item_done: bool = Field(description="True when the caller has nothing left to answer on this image.")
    annotators_needed: int = Field(
        description="More annotators who must answer this image before all its questions are decided (a "
        "strict majority of the panel) and it counts on the leaderboard; 0 when it is decided or discarded."
    )
    next: NextItemRead | None = Field(default=None, description="The next image, when asked for.")
    paused: str | None = Field(
        default=None,
        description="Why these answers paused the caller in this competition (their accuracy on gold "
        "questions fell below its threshold); no next image is then leased.",
    )


class SkipCreate(BaseModel):
    """Skip an item's image: hand it back without answering."""

    item_id: int


class FlagCreate(BaseModel):
    """Flag an item's image as too difficult or not a natural photo."""

    item_id: int
    reason: FlagReason = Field(
        default=FlagReason.too_difficult,
        description="too_difficult (default) or not_natural: not a natural photo (drawn, rendered, a "
        "composite). Either counts towards discarding the image; admins review both.",
    )


class FlagRead(BaseModel):
    """Whether the panel has now discarded the image (its pairs then label their next reserve image)."""

    discarded: bool


class UndoRead(BaseModel):
    """What undo took back, and the item to answer again (the undone question first).

    `item` is null when nothing is left to ask the caller on that image (its questions were decided by
    others meanwhile, or the image was discarded).
    """

    undone: Literal["answer", "flag"]
    question_id: int | None = Field(description="The question whose answer was taken back (null for a flag).")
    item: ItemRead | None
    flags_kept: int = Field(
        description="The caller's flags after the step undone that stay: on images the panel has discarded "
        "(a panel of one discards at each flag), which cannot be withdrawn, so undo steps past them."
    )


class MyStatsRead(BaseModel):
    """The caller's progress: answers today (UTC) and in total, flags, and images left.

    Never their gold score: it would change right after a gold answer and so mark the image as gold.
    Admins see it in …/annotators.
    """

    answered_today: int
    answered_total: int
    flagged: int
    images_left: int = Field(
        description="Images the caller may still be given: their questions need votes and the caller has not "
        "finished or flagged them (those they skipped included); 0 when the queue is finished for them, "
        "or settled."
    )
    settled: bool = Field(
        default=False,
        description="The competition samples actively and its ranking is settled: nothing useful is left "
        "to label (POST …/next says `settled`).",
    )


class AnnotatorStatsRead(BaseModel):
    """One annotator's work in a competition, for admins."""

    user_id: int
    username: str
    is_active: bool
    votes_excluded: bool
    answered_total: int
    answered_today: int
    flagged: int
    gold_answered: int = Field(description="Gold questions answered; a first answer counts, undo or not.")
    gold_correct: int
    gold_accuracy: float | None
    mean_seconds: float | None

    @classmethod
    def of(cls, stats: AnnotatorStats) -> "AnnotatorStatsRead":
        """The API view of an annotator's statistics."""
        return cls(**vars(stats), gold_accuracy=stats.gold_accuracy)


class GoldAnswerCreate(BaseModel):
    """A class and the known answer to "does this image contain it?"."""

    class_index: int = Field(ge=0, description="The class's index in the competition's label set.")
    answer: bool = Field(description="True: the image contains this class.")


class GoldCreate(BaseModel):
    """Gold questions on one image of the competition: one or two classes with known answers."""

    image_sha256: str = Field(pattern=SHA256_PATTERN.pattern)
    questions: list[GoldAnswerCreate] = Field(
        min_length=1,
        max_length=2,
        description="Two classes, unless a pair already asks about the image: every image shows at least "
        "two questions, so a gold image with one would stand out.",
    )


class GoldRead(BaseModel):
    """A gold question with its known answer."""

    question_id: int
    image_sha256: str
    class_index: int
    class_name: str
    answer: bool


class QualityFlagRead(BaseModel):
    """A flag on an annotator's answers and the admin's decision, if any."""

    id: int
    user_id: int
    username: str
    kind: QualityFlagKind = Field(
        description="gold: gold accuracy below the threshold (the annotator is paused until decided); fast: "
        "a streak far faster than their median; run: a long run of one answer."
    )
    detail: str
    created_at: datetime
    decision: QualityDecision | None
    decided_at: datetime | None

    @classmethod
    def of(cls, view: FlagView) -> "QualityFlagRead":
        """The API view of a flag."""
        flag = view.flag
        return cls(
            id=flag.id,
            user_id=flag.user_id,
            username=view.username,
            kind=flag.kind,
            detail=flag.detail,
            created_at=flag.created_at,
            decision=flag.decision,
            decided_at=flag.decided_at,
        )


class QualityDecisionCreate(BaseModel):
    """An admin's decision on an open flag."""

    decision: QualityDecision = Field(
        description="resumed: the annotator goes on (a gold pause ends, their gold accuracy is measured "
        "afresh); excluded: every vote of theirs stops counting and the questions they answered are "
        "re-decided."
    )


class ReviewEntryRead(BaseModel):
    """One thing awaiting adjudication: a split question, or an image discarded or flagged as not natural."""

    kind: AdjudicationKind
    image_sha256: str
    question_id: int | None = Field(description="The split question; null for an image.")
    class_index: int | None
    class_name: str | None
    yes_votes: int | None
    no_votes: int | None
    outcome: bool | None = Field(description="The panel's outcome of the split question.")
    too_difficult_flags: int
    not_natural_flags: int
    discarded: bool = Field(description="The panel discarded the image (its reserves replaced it).")


class AdjudicationCreate(BaseModel):
    """An admin's verdict on a split question (question_id given) or on an image (discarded or flagged)."""

    image_sha256: str = Field(pattern=SHA256_PATTERN.pattern)
    question_id: int | None = None
    verdict: Verdict
    reason: str = Field(min_length=1, max_length=2000, description="Why; recorded and exported.")


class AdjudicationRead(BaseModel):
    """A recorded verdict. outcome and panel_outcome: the question's outcome for a split decision; whether
    the image is discarded for an image."""

    id: int
    kind: AdjudicationKind
    image_sha256: str
    question_id: int | None
    verdict: Verdict
    panel_outcome: bool | None
    outcome: bool | None
    reason: str
    decided_by: str
    created_at: datetime


class WorkRecordRead(BaseModel):
    """One annotator's work on one UTC day, for paying them."""

    day: date
    user_id: int
    username: str
    answers: int = Field(description="Answers that stand (an undone one is gone).")
    active_seconds: float = Field(
        description=f"Σ seconds per answer, each capped at {ACTIVE_SECONDS_CAP:g} s (beyond it, idle)."
    )
    gold_answered: int
    gold_correct: int
    gold_accuracy: float | None

    @classmethod
    def of(cls, record: WorkRecord) -> "WorkRecordRead":
        """The API view of a work record."""
        return cls(**vars(record), gold_accuracy=record.gold_accuracy)


class SamplingUpdate(BaseModel):
    """How the competition's labelling queue picks the next image."""

    sampling: Sampling = Field(
        description="`uniform`: every selected image of every pair to a strict majority of the panel, the "
        "paper's protocol; `active`: the images of the pairs that can still change the ranking first, "
        "questions decided by two or more agreeing votes of reliable annotators, and nothing more once "
        "the ranking is settled (README, Active sampling)."
    )


class SamplingRead(BaseModel):
    """A competition's sampling and, under active sampling, the policy's last decision."""

    sampling: Sampling
    settled: bool = Field(description="Active sampling: the policy found the ranking settled.")
    annotator_reliability: float | None = Field(
        description="Active sampling: the annotators' accuracy the policy last estimated (null before)."
    )
