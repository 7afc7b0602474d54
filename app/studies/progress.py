"""A participant's work in a study and how they leave it.

Their work counts from their consent (arrived_at) until they leave (finished_at): the images they answered
(at least one answer standing), their active time by the server's clock
(app.labelling.quality_control.work_records) and their first answers to gold questions. They leave, first
match:

- screened_out: quality control paused them in the competition (an open gold flag);
- completed: they answered the study's upper limit (max_images);
- completed or timed_out: the time limit passed, with or without the required images;
- completed or no_work_left: nothing is left for them to label, with or without the required images;
- completed, when they choose to, once they have answered the required images.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, case, distinct, func, or_, select
from sqlalchemy.orm import Session

from app.competitions.models import CompetitionMember
from app.errors import Conflict, NotFound
from app.labelling.models import GoldAnswer, Question, Vote
from app.labelling.quality_control.annotators import end_leases, images_left, lock_annotator
from app.labelling.quality_control.quality import paused_reason
from app.labelling.quality_control.work_records import active_seconds
from app.studies.enums import Outcome
from app.studies.models import Study, StudyParticipant
from app.users.models import User


@dataclass(frozen=True)
class Work:
    """What a participant did in a study."""

    images: int = 0
    active_seconds: float = 0.0
    gold_answered: int = 0
    gold_correct: int = 0

    @property
    def gold_accuracy(self) -> float | None:
        """gold_correct / gold_answered, or None without gold answers."""
        return self.gold_correct / self.gold_answered if self.gold_answered else None


def deadline(study: Study, participant: StudyParticipant) -> datetime:
    """When the participant's time is up: their consent plus the study's time limit."""
    return participant.arrived_at + timedelta(minutes=study.time_limit_minutes)


def participants_work(
    db_session: Session, study: Study, participant_ids: list[int] | None = None
) -> dict[int, Work]:
    """The work of each participant of the study (or of those given) by participant id; one query for the
    votes, one for the gold answers."""
    p = StudyParticipant
    votes = (
        select(p.id, func.count(distinct(Question.image_id)), active_seconds())
        .join(Vote, _in_window(Vote))
        .join(Question, Question.id == Vote.question_id)
        .where(p.study_id == study.id, Vote.competition_id == study.competition_id)
        .group_by(p.id)
    )
    gold = (
        select(p.id, func.count(), func.sum(case((GoldAnswer.answer == Question.gold_answer, 1), else_=0)))
        .join(GoldAnswer, _in_window(GoldAnswer))
        .join(Question, Question.id == GoldAnswer.question_id)
        .where(p.study_id == study.id, Question.competition_id == study.competition_id)
        .group_by(p.id)
    )
    if participant_ids is not None:
        votes, gold = votes.where(p.id.in_(participant_ids)), gold.where(p.id.in_(participant_ids))
    answered = {id_: (images, float(seconds or 0)) for id_, images, seconds in db_session.execute(votes)}
    scored = {id_: (count, int(correct or 0)) for id_, count, correct in db_session.execute(gold)}
    return {
        id_: Work(*answered.get(id_, (0, 0.0)), *scored.get(id_, (0, 0)))
        for id_ in set(answered) | set(scored)
    }


def participant_votes_by_question(db_session: Session, competition_id: int) -> dict[tuple[int, int], int]:
    """Votes that count as some study participant's work in the competition (in their window, as
    participants_work counts them) per (image, class) question: deleting one lowers their images answered,
    active time and bonus."""
    rows = db_session.execute(
        select(Question.image_id, Question.class_index, func.count(distinct(Vote.id)))
        .join(Vote, Vote.question_id == Question.id)
        .join(StudyParticipant, _in_window(Vote))
        .join(Study, Study.id == StudyParticipant.study_id)
        .where(Question.competition_id == competition_id, Study.competition_id == competition_id)
        .group_by(Question.image_id, Question.class_index)
    )
    return {(image_id, class_index): count for image_id, class_index, count in rows}


def _in_window(table):
    """The participant's rows of `table` (votes, gold answers) from their consent until they left."""
    p = StudyParticipant
    return and_(
        table.user_id == p.user_id,
        table.created_at >= p.arrived_at,
        or_(p.finished_at.is_(None), table.created_at < p.finished_at),
    )


def outcome_due(
    study: Study, participant: StudyParticipant, work: Work, paused: bool, now: datetime, left: int | None
) -> Outcome | None:
    """How the participant leaves now (the module's rules, first match), their recorded outcome once they
    have left; None while there is work to do. `left`: the images left for them (None: not known, the rule
    on running out is skipped)."""
    if participant.outcome is not None:
        return participant.outcome
    if paused:
        return Outcome.screened_out
    if work.images >= study.max_images:
        return Outcome.completed
    reached = Outcome.completed if work.images >= study.required_images else None
    if now >= deadline(study, participant):
        return reached or Outcome.timed_out
    if left == 0:
        return reached or Outcome.no_work_left
    return None


@dataclass(frozen=True)
class Participation:
    """A participant in a study, their work and how they leave now (None: work to do)."""

    study: Study
    participant: StudyParticipant
    work: Work
    due: Outcome | None

    @property
    def may_finish(self) -> bool:
        """Whether they may leave now as having completed the study."""
        return self.due is None and self.work.images >= self.study.required_images


def participation(*, db_session: Session, study: Study, user: User, now: datetime) -> Participation:
    """The caller's participation in the study, or NotFound (for anyone else, admins too)."""
    participant = db_session.scalar(
        select(StudyParticipant).where(
            StudyParticipant.study_id == study.id, StudyParticipant.user_id == user.id
        )
    )
    if participant is None:
        raise NotFound(f"you take no part in study {study.id}")
    work = participants_work(db_session, study, [participant.id]).get(participant.id, Work())
    paused = paused_reason(db_session=db_session, competition_id=study.competition_id, user_id=user.id)
    left = images_left(db_session=db_session, user_id=user.id, competition_id=study.competition_id)
    due = outcome_due(study, participant, work, paused is not None, now, left.get(study.competition_id, 0))
    return Participation(study, participant, work, due)


def finish(*, db_session: Session, study: Study, user: User, now: datetime) -> Outcome:
    """The participant leaves the study, and how: with the outcome due, or as completed once they have
    answered the required images (else Conflict). The outcome is recorded once (leaving again changes it
    not); their
    membership of the competition ends, and their leases there with it.

    Their answers in flight land first, and none after: the account's row is locked as a deactivation
    locks it (app.labelling.quality_control.annotators.lock_annotator)."""
    lock_annotator(db_session=db_session, user=user)
    state = participation(db_session=db_session, study=study, user=user, now=now)
    if state.participant.outcome is not None:
        return state.participant.outcome
    outcome = state.due or (Outcome.completed if state.may_finish else None)
    if outcome is None:
        more = study.required_images - state.work.images
        raise Conflict(f"answer {more} more image{'s' if more != 1 else ''} before you finish")
    state.participant.outcome, state.participant.finished_at = outcome, now
    member = db_session.get(CompetitionMember, (study.competition_id, user.id))
    if member is not None:
        db_session.delete(member)
    end_leases(db_session=db_session, user=user, competition_id=study.competition_id)
    db_session.flush()
    return outcome
