"""Adjudication: an admin reviews contested labels (split decisions, images the panel discarded as too
difficult, images flagged as not natural photos) and confirms or overturns each, with a reason.

An overturned split question takes the other outcome, which the leaderboard then counts; the question is
marked adjudicated, so recounts (undo, vote exclusion) no longer change it. An overturned discard or
not-natural flag keeps the image: it returns to every pair that had selected it, beside the reserve image
promoted in its place (so that pair has one image more than k), and flags no longer discard it. A confirmed
not-natural flag discards the image as the panel would. Each verdict is locked under the image's item, as
answers and flags are (items.py), so none lands on a state it did not see.
"""

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.db.base import utcnow
from app.errors import Conflict, InvalidInput, NotFound
from app.images.models import CompetitionImage, Image
from app.images.service import image_id_in_competition
from app.labelling import rules
from app.labelling.items import lock_item, refresh_needed
from app.labelling.models import (
    Adjudication,
    AdjudicationKind,
    DifficultyFlag,
    FlagReason,
    LabelItem,
    PairImageRole,
    Question,
    Verdict,
)
from app.labelling.subsets import ask, discard_item, pair_images_of
from app.labelling.types import LabellingSettings
from app.users.models import User


@dataclass(frozen=True)
class ReviewEntry:
    """One thing awaiting an admin: a split question (with its counts and outcome) or an image (with its
    counted flags and whether the panel discarded it)."""

    kind: AdjudicationKind
    image_sha256: str
    question_id: int | None = None
    class_index: int | None = None
    yes_votes: int | None = None
    no_votes: int | None = None
    outcome: bool | None = None
    too_difficult_flags: int = 0
    not_natural_flags: int = 0
    discarded: bool = False


def review_queue(*, db_session: Session, competition: Competition) -> list[ReviewEntry]:
    """Split decisions on images still in their pairs (rules.split, in SQL), then discarded or not-natural
    flagged images that are not excluded, each not yet adjudicated; oldest first."""
    least = max(1, rules.majority(competition.panel_size) - 1)
    split_questions = db_session.execute(
        select(Question, Image.sha256)
        .join(Image, Image.id == Question.image_id)
        .join(
            LabelItem,
            (LabelItem.competition_id == Question.competition_id) & (LabelItem.image_id == Question.image_id),
        )
        .where(
            Question.competition_id == competition.id,
            Question.gold_answer.is_(None),
            Question.outcome.is_not(None),
            ~Question.adjudicated,
            Question.yes_votes >= least,
            Question.no_votes >= least,
            ~LabelItem.discarded,
        )
        .order_by(Question.id)
    ).all()
    entries = [
        ReviewEntry(
            AdjudicationKind.split_decision,
            sha256,
            question.id,
            question.class_index,
            question.yes_votes,
            question.no_votes,
            question.outcome,
        )
        for question, sha256 in split_questions
    ]
    return entries + _images_to_review(db_session, competition)


def _images_to_review(db_session: Session, competition: Competition) -> list[ReviewEntry]:
    """Images not excluded and not yet adjudicated that the panel discarded or someone flagged as not a
    natural photo, by item id."""
    flags = counted_flags(db_session, competition)
    reviewed = select(Adjudication.image_id).where(
        Adjudication.competition_id == competition.id, Adjudication.kind != AdjudicationKind.split_decision
    )
    flagged_artificial = [image_id for image_id, by in flags.items() if by.get(FlagReason.not_natural)]
    rows = db_session.execute(
        select(LabelItem.image_id, LabelItem.discarded, Image.sha256)
        .join(Image, Image.id == LabelItem.image_id)
        .join(
            CompetitionImage,
            (CompetitionImage.competition_id == LabelItem.competition_id)
            & (CompetitionImage.image_id == LabelItem.image_id),
        )
        .where(
            LabelItem.competition_id == competition.id,
            LabelItem.discarded | LabelItem.image_id.in_(flagged_artificial),
            ~CompetitionImage.excluded,
            LabelItem.image_id.not_in(reviewed),
        )
        .order_by(LabelItem.id)
    ).all()
    entries = []
    for image_id, discarded, sha256 in rows:
        by = flags.get(image_id, {})
        artificial = by.get(FlagReason.not_natural, 0)
        kind = AdjudicationKind.not_natural if artificial else AdjudicationKind.discarded
        difficult = by.get(FlagReason.too_difficult, 0)
        entries.append(
            ReviewEntry(
                kind, sha256, too_difficult_flags=difficult, not_natural_flags=artificial, discarded=discarded
            )
        )
    return entries


def counted_flags(
    db_session: Session, competition: Competition, image_id: int | None = None
) -> dict[int, dict[FlagReason, int]]:
    """{image_id: {reason: flags}} of annotators whose votes count, on every image or on one."""
    statement = (
        select(DifficultyFlag.image_id, DifficultyFlag.reason, func.count().label("flags"))
        .join(User, User.id == DifficultyFlag.user_id)
        .where(DifficultyFlag.competition_id == competition.id, ~User.votes_excluded)
        .group_by(DifficultyFlag.image_id, DifficultyFlag.reason)
    )
    if image_id is not None:
        statement = statement.where(DifficultyFlag.image_id == image_id)
    flags: dict[int, dict[FlagReason, int]] = {}
    for row in db_session.execute(statement).all():
        flags.setdefault(row.image_id, {})[row.reason] = row.flags
    return flags


def adjudicate(
    *,
    db_session: Session,
    competition: Competition,
    image_sha256: str,
    question_id: int | None,
    verdict: Verdict,
    reason: str,
    user: User,
) -> Adjudication:
    """Record an admin's verdict on a split question (question_id given) or on an image (module docstring)."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput("give a reason: it is recorded with the verdict and exported")
    image_id = image_id_in_competition(db_session=db_session, competition=competition, sha256=image_sha256)
    item = lock_item(db_session, LabellingSettings.of(competition), image_id)
    if question_id is None:
        kind, before, after = _judge_image(db_session, competition, item, verdict)
    else:
        kind, before, after = _judge_question(db_session, competition, item, question_id, verdict)
    adjudication = Adjudication(
        competition_id=competition.id,
        image_id=image_id,
        question_id=question_id,
        kind=kind,
        verdict=verdict,
        panel_outcome=before,
        outcome=after,
        reason=reason,
        decided_by=user.username,
        created_at=utcnow(),
    )
    db_session.add(adjudication)
    db_session.flush()
    return adjudication


def _judge_question(
    db_session: Session, competition: Competition, item: LabelItem, question_id: int, verdict: Verdict
) -> tuple[AdjudicationKind, bool, bool]:
    """Confirm or overturn a split question's outcome; (kind, the panel's outcome, the outcome now)."""
    question = db_session.scalar(
        select(Question)
        .where(Question.id == question_id, Question.image_id == item.image_id)
        .execution_options(populate_existing=True)
    )
    if question is None:
        raise NotFound(f"no question {question_id} on this image")
    if question.adjudicated:
        raise Conflict(f"question {question_id} is adjudicated already")
    split = rules.split(question.yes_votes, question.no_votes, competition.panel_size)
    if question.gold_answer is not None or question.outcome is None or not split:
        raise Conflict(
            f"question {question_id} is not a split decision "
            f"({question.yes_votes} yes, {question.no_votes} no)"
        )
    before = question.outcome
    if verdict == Verdict.overturned:
        question.outcome = not before
    question.adjudicated = True
    return AdjudicationKind.split_decision, before, question.outcome


def _judge_image(
    db_session: Session, competition: Competition, item: LabelItem, verdict: Verdict
) -> tuple[AdjudicationKind, bool, bool]:
    """Confirm or overturn a discard or a not-natural flag; (kind, discarded before, discarded now)."""
    reviewed = db_session.scalar(
        select(Adjudication.id).where(
            Adjudication.competition_id == competition.id,
            Adjudication.image_id == item.image_id,
            Adjudication.kind != AdjudicationKind.split_decision,
        )
    )
    if reviewed is not None:
        raise Conflict("this image is adjudicated already")
    flags = counted_flags(db_session, competition, item.image_id).get(item.image_id, {})
    excluded = db_session.scalar(
        select(CompetitionImage.excluded).where(
            CompetitionImage.competition_id == competition.id, CompetitionImage.image_id == item.image_id
        )
    )
    if excluded or not (item.discarded or flags.get(FlagReason.not_natural)):
        raise Conflict("this image is neither discarded by the panel nor flagged as not a natural photo")
    kind = AdjudicationKind.not_natural if flags.get(FlagReason.not_natural) else AdjudicationKind.discarded
    before = item.discarded
    if verdict == Verdict.overturned:
        item.kept = True
        if item.discarded:
            _restore(db_session, competition, item)
    elif kind == AdjudicationKind.not_natural and not item.discarded:
        discard_item(db_session, LabellingSettings.of(competition), item)
    return kind, before, item.discarded


def _restore(db_session: Session, competition: Competition, item: LabelItem) -> None:
    """Return a discarded image to every pair that selected it and ask its questions again."""
    item.discarded = False
    settings = LabellingSettings.of(competition)
    returned = pair_images_of(db_session, settings, item.image_id, PairImageRole.discarded)
    for pair_image in returned:
        pair_image.role = PairImageRole.selected
    db_session.flush()
    if returned:
        classes = {label for row in returned for label in (row.label_a, row.label_b)}
        ask(db_session, settings, {item.image_id: (min(row.position for row in returned), classes)})
    refresh_needed(db_session, settings, [item])


def adjudications(*, db_session: Session, competition: Competition) -> list[tuple[Adjudication, str]]:
    """Every verdict of the competition with its image's hash, oldest first."""
    return list(
        db_session.execute(
            select(Adjudication, Image.sha256)
            .join(Image, Image.id == Adjudication.image_id)
            .where(Adjudication.competition_id == competition.id)
            .order_by(Adjudication.id)
        ).all()
    )
