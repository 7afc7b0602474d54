"""Undo: take back an annotator's latest answer or flag, up to ten steps below their highest point."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.statements import conflict_insert
from app.errors import Conflict, NotFound
from app.labelling import rules
from app.labelling.items import lock_item, refresh_needed, set_assignment
from app.labelling.models import AssignmentStatus, DifficultyFlag, Question, UndoDepth, Vote
from app.labelling.queue import present
from app.labelling.types import Labeller, LabellingSettings, UndoResult


def undo_last(*, db_session: Session, competition: LabellingSettings, user: Labeller) -> UndoResult:
    """Take back the annotator's latest answer or flag and lease its image again, that question first.

    Only the ten most recent stay editable: undo stops ten steps below the highest point reached. Locks
    as submit and flag do (the image's item, then the annotator's undo row), so they never deadlock; if the
    annotator's latest step changed before the locks were held, nothing is undone (409, try again).
    """
    latest = _latest_step(db_session, competition, user)
    if latest is None:
        raise NotFound("there is nothing to undo")
    step, image_id = latest
    item = lock_item(db_session, competition, image_id)
    depth = _lock_undo_depth(db_session, competition, user)
    if depth.depth >= rules.UNDO_LIMIT:
        raise Conflict(f"only the last {rules.UNDO_LIMIT} answers can be undone")
    if _latest_step(db_session, competition, user) != latest:
        raise Conflict("your answers changed while undoing (another request?); try again")
    now = utcnow()
    if isinstance(step, DifficultyFlag):
        if item.discarded:
            raise Conflict("the panel has already discarded this image, so the flag stays")
        db_session.delete(step)
        if not user.votes_excluded:
            item.flags -= 1
        undone, first_question_id = "flag", None
    else:
        question = db_session.get_one(Question, step.question_id, populate_existing=True)
        if question.gold_answer is None and not user.votes_excluded:
            rules.count_vote(question, step.answer, -1, competition.panel_size, now)
        db_session.delete(step)
        db_session.flush()
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
    return UndoResult(undone, first_question_id, presented)


def _latest_step(
    db_session: Session, competition: LabellingSettings, user: Labeller
) -> tuple[Vote | DifficultyFlag, int] | None:
    """The annotator's latest answer or flag in the competition with its image id; None if neither."""
    vote = db_session.execute(
        select(Vote, Question.image_id)
        .join(Question, Question.id == Vote.question_id)
        .where(Vote.user_id == user.id, Vote.competition_id == competition.id)
        .order_by(Vote.created_at.desc(), Vote.id.desc())
        .limit(1)
    ).first()
    flag = db_session.scalar(
        select(DifficultyFlag)
        .where(DifficultyFlag.competition_id == competition.id, DifficultyFlag.user_id == user.id)
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
