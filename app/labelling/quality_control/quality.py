"""Quality control that acts: after each submission the annotator's answers are checked
(app.labelling.quality_control.checks) and flags raised, a gold flag pausing them in the competition; an admin
resumes them or excludes their votes.

The checks read one statement (QUALITY_WINDOW, sent with the answer's writes in their round trip) per
submission that recorded votes, and a second (GOLD_SINCE_LAST_FLAG) when it answered a gold question; they
write only when a flag is raised. A flag row is written last in the answer's transaction (lock order:
app.labelling.items); an admin's decision locks the annotator's row first
(app.labelling.quality_control.annotators.lock_annotator), so it waits for their answers in flight.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.db.base import utcnow
from app.errors import Conflict, NotFound
from app.i18n import N_, in_language, translations
from app.labelling.models import QualityDecision, QualityFlag, QualityFlagKind
from app.labelling.quality_control import checks
from app.labelling.quality_control.annotators import lock_annotator, set_votes_excluded
from app.labelling.quality_control.quality_statements import GOLD_SINCE_LAST_FLAG, QUALITY_WINDOW
from app.labelling.types import Labeller, LabellingSettings
from app.users.models import User


def recent_votes(
    db_session: Session, competition: LabellingSettings, user: Labeller
) -> Callable[[], list[checks.RecentVote]]:
    """The annotator's latest votes in the competition that the checks read (QUALITY_WINDOW), to read once
    the answer's pipelined writes have ended: sent inside them, it goes in their round trip and sees them."""
    where = {"competition_id": competition.id, "user_id": user.id}
    rows = QUALITY_WINDOW.rows_after_sync(db_session, where)
    return lambda: [
        checks.RecentVote(row.answer, row.seconds, row.since_run_flag, row.since_fast_flag) for row in rows()
    ]


def check_answers(
    db_session: Session,
    competition: LabellingSettings,
    user: Labeller,
    now: datetime,
    recent: list[checks.RecentVote],
    answered_gold: bool,
) -> str | None:
    """Check the annotator's latest answers (`recent`, from recent_votes) and raise the flags they call for;
    returns why the annotator is now paused (a gold flag raised), or None. Gold accuracy changes only with
    a gold answer, so it is read only on a submission that answered a gold question."""
    where = {"competition_id": competition.id, "user_id": user.id}
    raised = {
        QualityFlagKind.gold: _gold_shortfall(db_session, competition, where) if answered_gold else None,
        QualityFlagKind.run: checks.long_run(recent),
        QualityFlagKind.fast: checks.fast_streak(recent),
    }
    flagged = {**where, "created_at": now}
    new_flags = [{**flagged, "kind": kind, "detail": detail} for kind, detail in raised.items() if detail]
    if new_flags:
        db_session.execute(insert(QualityFlag), new_flags)
    return raised[QualityFlagKind.gold]


def _gold_shortfall(db_session: Session, competition: LabellingSettings, where: dict) -> str | None:
    """checks.gold_shortfall of the annotator's gold answers since their last gold flag."""
    (gold,) = GOLD_SINCE_LAST_FLAG.rows(db_session, where)
    return checks.gold_shortfall(
        gold.answered, gold.correct, competition.gold_threshold, competition.gold_min_answers
    )


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


PAUSED = N_("You are paused in this competition: {reason}. An admin will review your answers.")


def paused_message(reason: str, locale: str) -> str:
    """What a paused annotator is told, in their language (the stored reason too, where it is gold's)."""
    words = translations(locale)
    return words.gettext(PAUSED).format(reason=in_language(reason, (checks.GOLD_SHORTFALL,), words))


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
