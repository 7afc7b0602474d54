"""Annotators as an admin sees them: deactivating (pausing) one (their leases end), excluding their votes
(their questions decided afresh), and their progress and accuracy on gold questions.

Deactivation and exclusion first lock the annotator's row (lock_annotator), which every labelling request that
writes holds shared until it commits (app.labelling.annotating.caller): so they wait for the annotator's
answers in flight, which then count as cast before, and the annotator's next requests wait for them and see
the new state. Call them from a transaction that does not hold the row shared itself (an admin's request, a
job), or it would wait for the annotator's other requests to end.
"""

from collections.abc import Sequence

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.orm import Session

from app.competitions.models import Competition, Sampling
from app.db.base import utcnow
from app.labelling import rules
from app.labelling.items import (
    counted_votes,
    decide_questions,
    lock_items,
    questions_of_images,
    recount,
)
from app.labelling.models import (
    Assignment,
    AssignmentStatus,
    DifficultyFlag,
    GoldAnswer,
    LabelItem,
    Question,
    Vote,
)
from app.labelling.subsets import discard_item
from app.labelling.types import AnnotatorStats, LabellingSettings, early_rule
from app.users.models import User
from app.users.service import set_active


def lock_annotator(*, db_session: Session, user: User) -> None:
    """Lock the annotator's row for update and read it afresh: waits for their labelling requests in flight
    to commit, and holds off their next ones until this transaction ends (FOR NO KEY UPDATE: rows that
    only refer to the account, such as new votes, need not wait)."""
    db_session.refresh(user, with_for_update={"key_share": True})


def deactivate(*, db_session: Session, user: User, keep_tokens: bool = False) -> None:
    """Deactivate (pause) an account: it can no longer sign in or label, its API tokens are revoked unless
    keep_tokens, and its running leases end at once so that others take those images. Its answers in flight
    land first and none after (lock_annotator); its votes keep counting unless excluded."""
    lock_annotator(db_session=db_session, user=user)
    set_active(db_session=db_session, user=user, is_active=False, keep_tokens=keep_tokens)
    end_leases(db_session=db_session, user=user)


def end_leases(*, db_session: Session, user: User, competition_id: int | None = None) -> None:
    """End the annotator's running leases now (in one competition, when given), so that others take those
    images; call it with the annotator's row locked (lock_annotator), as their own requests take it."""
    now = utcnow()
    leased = update(Assignment).where(
        Assignment.user_id == user.id,
        Assignment.status == AssignmentStatus.leased,
        Assignment.expires_at > now,
    )
    if competition_id is not None:
        items = select(LabelItem.id).where(LabelItem.competition_id == competition_id)
        leased = leased.where(Assignment.item_id.in_(items))
    db_session.execute(leased.values(expires_at=now))


def set_votes_excluded(*, db_session: Session, user: User, votes_excluded: bool) -> None:
    """Exclude (or count again) every vote and flag of an annotator; re-decide the questions they touched.

    Their answers in flight land before (and are recounted) or after (and count as the new state says):
    lock_annotator. A discard stands: an image that the excluded flags helped discard stays discarded,
    because its pairs have already moved on to their reserve images.
    """
    lock_annotator(db_session=db_session, user=user)
    if user.votes_excluded == votes_excluded:
        return
    user.votes_excluded = votes_excluded
    db_session.flush()
    touched = set(
        db_session.execute(
            select(Question.competition_id, Question.image_id)
            .join(Vote, Vote.question_id == Question.id)
            .where(Vote.user_id == user.id, Question.gold_answer.is_(None))
        ).all()
    ) | set(
        db_session.execute(
            select(DifficultyFlag.competition_id, DifficultyFlag.image_id).where(
                DifficultyFlag.user_id == user.id
            )
        ).all()
    )
    for competition_id in sorted({competition_id for competition_id, _ in touched}):
        competition = LabellingSettings.of(db_session.get_one(Competition, competition_id))
        image_ids = sorted(image_id for cid, image_id in touched if cid == competition_id)
        redecide(db_session=db_session, competition=competition, image_ids=image_ids)


def redecide(*, db_session: Session, competition: LabellingSettings, image_ids: list[int]) -> None:
    """Recount the counted votes and flags on these images (of annotators whose votes are not excluded) and
    re-decide their questions and items, the items locked first in id order."""
    items = lock_items(db_session, competition, image_ids)
    questions = questions_of_images(db_session, competition, image_ids)
    counted = counted_votes(db_session, [q.id for q in questions])
    now = utcnow()
    early = early_rule(competition)
    regular = [question for question in questions if question.gold_answer is None]
    for question in regular:
        recount(question, counted.get(question.id))
    decide_questions(db_session, competition, regular, now)
    flags = dict(
        db_session.execute(
            select(DifficultyFlag.image_id, func.count())
            .join(User, User.id == DifficultyFlag.user_id)
            .where(
                DifficultyFlag.competition_id == competition.id,
                DifficultyFlag.image_id.in_(image_ids),
                ~User.votes_excluded,
            )
            .group_by(DifficultyFlag.image_id)
        ).all()
    )
    for item in items:
        item.flags = flags.get(item.image_id, 0)
        on_image = [question for question in questions if question.image_id == item.image_id]
        item.needed = rules.needed(item.discarded, on_image, competition.panel_size, early)
        if not item.discarded and not item.kept and rules.too_difficult(item.flags, competition.panel_size):
            discard_item(db_session, competition, item)
    db_session.flush()


def annotator_stats(
    *, db_session: Session, competition: LabellingSettings, user_ids: Sequence[int] | None = None
) -> list[AnnotatorStats]:
    """Answers (in total and since midnight UTC), flags, gold accuracy (of first answers, GoldAnswer) and
    mean seconds per annotator who took part in the competition, or of the given users."""
    midnight = utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
    votes = (
        select(
            Vote.user_id,
            func.count().label("answered_total"),
            func.sum(case((Vote.created_at >= midnight, 1), else_=0)).label("answered_today"),
            func.avg(Vote.seconds).label("mean_seconds"),
        )
        .where(Vote.competition_id == competition.id)
        .group_by(Vote.user_id)
    )
    gold = (
        select(
            GoldAnswer.user_id,
            func.count().label("answered"),
            func.sum(case((Question.gold_answer == GoldAnswer.answer, 1), else_=0)).label("correct"),
        )
        .join(Question, Question.id == GoldAnswer.question_id)
        .where(Question.competition_id == competition.id)
        .group_by(GoldAnswer.user_id)
    )
    flags = (
        select(DifficultyFlag.user_id, func.count().label("flagged"))
        .where(DifficultyFlag.competition_id == competition.id)
        .group_by(DifficultyFlag.user_id)
    )
    if user_ids is not None:
        votes = votes.where(Vote.user_id.in_(user_ids))
        gold = gold.where(GoldAnswer.user_id.in_(user_ids))
        flags = flags.where(DifficultyFlag.user_id.in_(user_ids))
    by_user = {row.user_id: row for row in db_session.execute(votes)}
    gold_by_user = {row.user_id: row for row in db_session.execute(gold)}
    flagged = dict(db_session.execute(flags).all())
    wanted = set(by_user) | set(gold_by_user) | set(flagged) if user_ids is None else set(user_ids)
    users = db_session.scalars(select(User).where(User.id.in_(wanted)).order_by(User.id))
    stats = []
    for user in users:
        row, gold_row = by_user.get(user.id), gold_by_user.get(user.id)
        stats.append(
            AnnotatorStats(
                user_id=user.id,
                username=user.username,
                is_active=user.is_active,
                votes_excluded=user.votes_excluded,
                answered_total=row.answered_total if row else 0,
                answered_today=row.answered_today if row else 0,
                flagged=flagged.get(user.id, 0),
                gold_answered=gold_row.answered if gold_row else 0,
                gold_correct=gold_row.correct if gold_row else 0,
                mean_seconds=float(row.mean_seconds) if row and row.mean_seconds is not None else None,
            )
        )
    return stats


def images_left(*, db_session: Session, user_id: int, competition_id: int | None = None) -> dict[int, int]:
    """Per competition (or only competition_id): the images the annotator may still be given, as
    queue.next_item hands them out: open ones (votes needed) they have not finished or flagged, and, where
    gold images are mixed in, images with a gold question they have not answered or flagged; those they
    skipped included either way, so that a skip moves the count alike on both; under active sampling never
    a parked item, and nothing once the ranking is settled. Competitions with none left are missing."""
    mine = Assignment.__table__.alias("mine")

    def my_status(*statuses: AssignmentStatus):
        """Whether the annotator's assignment on the item has one of these statuses."""
        return (
            select(mine.c.item_id)
            .where(mine.c.item_id == LabelItem.id, mine.c.user_id == user_id, mine.c.status.in_(statuses))
            .exists()
        )

    unanswered_gold = (
        select(Question.id)
        .where(
            Question.competition_id == LabelItem.competition_id,
            Question.image_id == LabelItem.image_id,
            Question.gold_answer.is_not(None),
            ~select(Vote.question_id)
            .where(Vote.question_id == Question.id, Vote.user_id == user_id)
            .exists(),
        )
        .exists()
    )
    gold_left = and_(Competition.gold_rate > 0, unanswered_gold)
    active = Competition.sampling == Sampling.active
    open_item = and_(LabelItem.needed > 0, or_(~active, LabelItem.priority > 0))  # active: not parked
    query = (
        select(LabelItem.competition_id, func.count().label("images"))
        .join(Competition, Competition.id == LabelItem.competition_id)
        .where(
            ~my_status(AssignmentStatus.done, AssignmentStatus.flagged),
            or_(open_item, gold_left),
            ~and_(active, Competition.settled),
        )
        .group_by(LabelItem.competition_id)
    )
    if competition_id is not None:
        query = query.where(LabelItem.competition_id == competition_id)
    return {row.competition_id: row.images for row in db_session.execute(query)}
