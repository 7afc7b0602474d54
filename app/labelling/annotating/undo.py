"""Undo: take back an annotator's latest answer or flag, up to ten steps below their highest point.

A flag on an image the panel has discarded cannot be taken back (the image has left its pairs, their reserves
are asked instead), so undo steps past it to the answer or flag before it and says so: with a panel of one
every flag discards at once, and would otherwise block every earlier answer.
"""

from datetime import datetime

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.statements import conflict_insert
from app.errors import Conflict, NotFound
from app.labelling import rules
from app.labelling.annotating.queue import present
from app.labelling.items import (
    counted_votes,
    decide_questions,
    lock_item,
    recount,
    refresh_needed,
    set_assignment,
)
from app.labelling.models import AssignmentStatus, DifficultyFlag, LabelItem, Question, UndoDepth, Vote
from app.labelling.types import Labeller, LabellingSettings, UndoResult

KEPT = "a flag on an image the panel has discarded stays (the image has left its pairs)"
"""What undo says of the flags it steps past."""


def undo_last(*, db_session: Session, competition: LabellingSettings, user: Labeller) -> UndoResult:
    """Take back the annotator's latest answer or flag and lease its image again, that question first; flags
    on images the panel has discarded stay and are stepped past (their number is in the result).

    Only the ten most recent stay editable: undo stops ten steps below the highest point reached. Locks
    as submit and flag do (the image's item, then the annotator's undo row), so they never deadlock; if the
    annotator's latest step changed before the locks were held, nothing is undone (409, try again).
    """
    latest = _latest_step(db_session, competition, user)
    if latest is None:
        kept = _flags_kept_since(db_session, competition, user, None)
        raise NotFound(f"there is nothing to undo: {KEPT}" if kept else "there is nothing to undo")
    step, image_id = latest
    item = lock_item(db_session, competition, image_id)
    depth = _lock_undo_depth(db_session, competition, user)
    if depth.depth >= rules.UNDO_LIMIT:
        raise Conflict(f"only the last {rules.UNDO_LIMIT} answers can be undone")
    if _latest_step(db_session, competition, user) != latest:
        raise Conflict("your answers changed while undoing (another request?); try again")
    now = utcnow()
    flags_kept = _flags_kept_since(db_session, competition, user, step.created_at)
    if isinstance(step, DifficultyFlag):
        db_session.delete(step)
        if not user.votes_excluded:
            item.flags -= 1
        undone, first_question_id = "flag", None
    else:
        question = db_session.get_one(Question, step.question_id, populate_existing=True)
        db_session.delete(step)
        db_session.flush()
        if question.gold_answer is None and not user.votes_excluded:
            recount(question, counted_votes(db_session, [question.id]).get(question.id))
            decide_questions(db_session, competition, [question], now)
        refresh_needed(db_session, competition, [item])
        undone, first_question_id = "answer", question.id
    set_assignment(db_session, item.id, user.id, AssignmentStatus.leased, now, keep_flagged=False)
    depth.depth += 1
    db_session.flush()
    presented = present(
        db_session,
        competition,
        item.id,
        item.image_id,
        item.discarded,
        user,
        now,
        first_question_id=first_question_id,
    )
    return UndoResult(undone, first_question_id, presented, flags_kept)


def _on_discarded_image(competition: LabellingSettings):
    """Whether a difficulty flag's image was discarded by the panel (its flag can no longer be withdrawn)."""
    return exists().where(
        LabelItem.competition_id == competition.id,
        LabelItem.image_id == DifficultyFlag.image_id,
        LabelItem.discarded,
    )


def _flags_kept_since(
    db_session: Session, competition: LabellingSettings, user: Labeller, since: datetime | None
) -> int:
    """How many of the annotator's flags on discarded images came after `since` (all of them if None)."""
    query = select(func.count()).where(
        DifficultyFlag.competition_id == competition.id,
        DifficultyFlag.user_id == user.id,
        _on_discarded_image(competition),
    )
    if since is not None:
        query = query.where(DifficultyFlag.created_at > since)
    return db_session.scalar(query) or 0


def _latest_step(
    db_session: Session, competition: LabellingSettings, user: Labeller
) -> tuple[Vote | DifficultyFlag, int] | None:
    """The annotator's latest answer or flag in the competition with its image id, flags on discarded images
    left out; None if neither."""
    vote = db_session.execute(
        select(Vote, Question.image_id)
        .join(Question, Question.id == Vote.question_id)
        .where(Vote.user_id == user.id, Vote.competition_id == competition.id)
        .order_by(Vote.created_at.desc(), Vote.id.desc())
        .limit(1)
    ).first()
    flag = db_session.scalar(
        select(DifficultyFlag)
        .where(
            DifficultyFlag.competition_id == competition.id,
            DifficultyFlag.user_id == user.id,
            ~_on_discarded_image(competition),
        )
        .order_by(DifficultyFlag.created_at.desc(), DifficultyFlag.id.desc())
        .limit(1)
    )
    if flag is not None and (vote is None or flag.created_at > vote[0].created_at):
        return flag, flag.image_id
    return None if vote is None else (vote[0], vote[1])


def _lock_undo_depth(db_session: Session, competition: LabellingSettings, user: Labeller) -> UndoDepth:
    """The annotator's undo row in the competition, created if missing (safe against a concurrent first
    undo) and locked."""
    db_session.execute(
        conflict_insert(db_session, UndoDepth)
        .values(competition_id=competition.id, user_id=user.id, depth=0)
        .on_conflict_do_nothing()
    )
    return db_session.get_one(
        UndoDepth, (competition.id, user.id), with_for_update=True, populate_existing=True
    )
