"""Quality control that acts: after each submission the annotator's answers are checked (app.labelling.checks)
and flags raised, a gold flag pausing them in the competition; an admin resumes them or excludes their votes.

The checks read one statement (QUALITY_WINDOW) per submission that recorded votes, and write only when a
flag is raised. A flag row is written last in the answer's transaction (lock order: app.labelling.items);
an admin's decision locks the annotator's row first (app.labelling.annotators.lock_annotator), so it waits
for their answers in flight.
"""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.db.base import utcnow
from app.errors import Conflict, NotFound
from app.labelling import checks
from app.labelling.annotators import lock_annotator, set_votes_excluded
from app.labelling.models import QualityDecision, QualityFlag, QualityFlagKind
from app.labelling.quality_statements import QUALITY_WINDOW
from app.labelling.types import Labeller, LabellingSettings
from app.users.models import User


def check_answers(
    db_session: Session, competition: LabellingSettings, user: Labeller, now: datetime
) -> str | None:
    """Check the annotator's latest answers and raise the flags they call for; returns why the annotator is
    now paused (a gold flag raised), or None."""
    rows = QUALITY_WINDOW.rows(db_session, {"competition_id": competition.id, "user_id": user.id})
    if not rows:
        return None
    recent = [checks.RecentVote(row.answer, row.seconds, row.created_at) for row in rows]
    raised = {
        QualityFlagKind.gold: checks.gold_shortfall(
            rows[0].gold_answered,
            rows[0].gold_correct,
            competition.gold_threshold,
            competition.gold_min_answers,
        ),
        QualityFlagKind.run: checks.long_run(recent, rows[0].run_flagged_at),
        QualityFlagKind.fast: checks.fast_streak(recent, rows[0].fast_flagged_at),
    }
    who = {"competition_id": competition.id, "user_id": user.id, "created_at": now}
    new_flags = [{**who, "kind": kind, "detail": detail} for kind, detail in raised.items() if detail]
    if new_flags:
        db_session.execute(insert(QualityFlag), new_flags)
    return raised[QualityFlagKind.gold]


def paused_reason(*, db_session: Session, competition_id: int, user_id: int) -> str | None:
    """Why the annotator is paused in the competition (their open gold flag), or None."""
    return db_session.scalar(
        select(QualityFlag.detail)
        .where(
            QualityFlag.competition_id == competition_id,
            QualityFlag.user_id == user_id,
            QualityFlag.kind == QualityFlagKind.gold,
            QualityFlag.decision.is_(None),
        )
        .limit(1)
    )


def paused_message(reason: str) -> str:
    """What a paused annotator is told."""
    return f"You are paused in this competition: {reason}. An admin will review your answers."


@dataclass(frozen=True)
class FlagView:
    """A quality flag with the annotator's name."""

    flag: QualityFlag
    username: str


def list_flags(*, db_session: Session, competition: Competition) -> list[FlagView]:
    """Every quality flag of the competition, open ones first, newest first."""
    rows = db_session.execute(
        select(QualityFlag, User.username)
        .join(User, User.id == QualityFlag.user_id)
        .where(QualityFlag.competition_id == competition.id)
        .order_by(QualityFlag.decision.is_not(None), QualityFlag.created_at.desc(), QualityFlag.id.desc())
    ).all()
    return [FlagView(flag, username) for flag, username in rows]


def decide_flag(
    *, db_session: Session, competition: Competition, flag_id: int, decision: QualityDecision
) -> FlagView:
    """Resume the annotator (their votes keep counting; a gold flag's pause ends and their gold accuracy is
    measured afresh) or exclude their votes (every question they answered re-decided); 409 once decided."""
    found = db_session.execute(
        select(QualityFlag, User)
        .join(User, User.id == QualityFlag.user_id)
        .where(QualityFlag.id == flag_id, QualityFlag.competition_id == competition.id)
    ).one_or_none()
    if found is None:
        raise NotFound(f"no quality flag {flag_id} in this competition")
    flag, user = found.QualityFlag, found.User
    lock_annotator(db_session=db_session, user=user)
    db_session.refresh(flag, with_for_update=True)
    if flag.decision is not None:
        raise Conflict(f"this flag was already decided: {flag.decision.value}")
    if decision == QualityDecision.excluded:
        set_votes_excluded(db_session=db_session, user=user, votes_excluded=True)
    flag.decision, flag.decided_at = decision, utcnow()
    db_session.flush()
    return FlagView(flag, user.username)
