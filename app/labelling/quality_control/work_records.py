"""Work records for paying annotators: per annotator and UTC day, their answers, active time and accuracy on
gold questions, over all competitions or one.

Active time is the sum of the seconds each answer took, each capped at ACTIVE_SECONDS_CAP: a longer wait was
the annotator away from the screen, not working, so it counts as the cap. The seconds stored are the server's
clock's, which the client's figures (the labelling page measures from showing a question to its answer) can
only lower (app.labelling.annotating.answers.timed_seconds). Answers are the votes that stand: an undone
answer is gone, and its replacement counts on its own day.
Gold accuracy counts each first answer to a gold question on the day it was given (as the admins' annotator
statistics do, app.labelling.quality_control.annotators).
"""

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import Date, case, cast, func, select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.errors import InvalidInput
from app.labelling.models import GoldAnswer, Question, Vote
from app.users.models import User

ACTIVE_SECONDS_CAP = 60.0
"""The most one answer adds to active time, in seconds: a question takes a few seconds, a zoomed look at a
hard image under a minute; beyond that the annotator was idle."""
MAX_DAYS = 366
"""The longest span of days one request covers."""
DEFAULT_DAYS = 31
"""The days covered when the first is not given: the month up to the last."""
FIRST_DAY, LAST_DAY = date(1970, 1, 1), date(9999, 12, 30)
"""The days a span may name: from the Unix epoch (no answer is older) to the last day whose end, midnight of
the next, Python's dates can still hold."""


@dataclass(frozen=True)
class WorkRecord:
    """One annotator's work on one UTC day."""

    day: date
    user_id: int
    username: str
    answers: int
    active_seconds: float
    gold_answered: int
    gold_correct: int

    @property
    def gold_accuracy(self) -> float | None:
        """gold_correct / gold_answered, or None without gold answers."""
        return self.gold_correct / self.gold_answered if self.gold_answered else None


def span(since: date | None, until: date | None) -> tuple[date, date]:
    """The days asked for, defaults filled in: until today (UTC), since DEFAULT_DAYS days up to until;
    InvalidInput for a day outside FIRST_DAY..LAST_DAY."""
    for name, day in (("since", since), ("until", until)):
        if day is not None and not FIRST_DAY <= day <= LAST_DAY:
            raise InvalidInput(f"{name} ({day}) must be a day from {FIRST_DAY} to {LAST_DAY}")
    until = until or utcnow().date()
    return since or until - timedelta(days=DEFAULT_DAYS - 1), until


def work_records(
    *, db_session: Session, since: date, until: date, competition_id: int | None = None
) -> list[WorkRecord]:
    """Every annotator's work on each UTC day from since to until (both included) on which they answered,
    in one competition or all, by day then username."""
    if since > until:
        raise InvalidInput(f"since ({since}) is after until ({until})")
    if (until - since).days >= MAX_DAYS:
        raise InvalidInput(f"work records cover at most {MAX_DAYS} days at a time")
    start = datetime.combine(since, time(), UTC)
    end = datetime.combine(until + timedelta(days=1), time(), UTC)
    votes = _per_day(db_session, Vote, start, end, competition_id).add_columns(
        func.count().label("answers"),
        func.sum(
            case(
                (Vote.seconds > ACTIVE_SECONDS_CAP, ACTIVE_SECONDS_CAP),
                else_=func.coalesce(Vote.seconds, 0.0),
            )
        ).label("active_seconds"),
    )
    gold = _per_day(db_session, GoldAnswer, start, end, competition_id).add_columns(
        func.count().label("gold_answered"),
        func.sum(case((GoldAnswer.answer == Question.gold_answer, 1), else_=0)).label("gold_correct"),
    )
    counted = {
        (_as_date(row.day), row.user_id): (row.answers, float(row.active_seconds or 0))
        for row in db_session.execute(votes)
    }
    scored = {
        (_as_date(row.day), row.user_id): (row.gold_answered, int(row.gold_correct or 0))
        for row in db_session.execute(gold)
    }
    keys = set(counted) | set(scored)
    names = dict(
        db_session.execute(select(User.id, User.username).where(User.id.in_({k[1] for k in keys}))).all()
    )
    records = [
        WorkRecord(key[0], key[1], names[key[1]], *counted.get(key, (0, 0.0)), *scored.get(key, (0, 0)))
        for key in keys
    ]
    return sorted(records, key=lambda record: (record.day, record.username))


def _per_day(db_session: Session, table, start: datetime, end: datetime, competition_id: int | None):
    """SELECT utc day, user_id FROM votes or gold answers (with their question) in [start, end), grouped by
    both; the aggregates are added by the caller."""
    day = _utc_day(db_session, table.created_at).label("day")
    query = (
        select(day, table.user_id)
        .join(Question, Question.id == table.question_id)
        .where(table.created_at >= start, table.created_at < end)
        .group_by(day, table.user_id)
    )
    if competition_id is not None:
        query = query.where(Question.competition_id == competition_id)
    return query


def _utc_day(db_session: Session, column):
    """The UTC calendar day of a stored time: Postgres converts from the session's time zone, SQLite
    stores UTC already."""
    if db_session.get_bind().dialect.name == "postgresql":
        return cast(func.timezone("UTC", column), Date)
    return func.date(column)


def _as_date(value: date | str) -> date:
    """A day as the database returns it (a date on Postgres, 'YYYY-MM-DD' text on SQLite) as a date."""
    return value if isinstance(value, date) else date.fromisoformat(value)
