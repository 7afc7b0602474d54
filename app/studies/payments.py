"""Paying a study's participants: a row per participant (platform ids, work by the server's clock, outcome,
bonus), as CSV a spreadsheet opens safely, and the platform's bulk bonus file (`participant_id,amount` a
line, as Prolific's "Bulk bonus payments" takes it).

The bonus follows the study's rule, rounded to cents half up:

- per_image: rate × (images answered, at most max_images, − required_images), for those who completed;
- per_minute: rate × active minutes (Σ seconds per answer, each capped at 60 s, / 60), for those who
  completed or ran out of work (both worked as asked; the screened-out and the timed-out earn none).
"""

import csv
import io
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.csv_cells import neutralised
from app.labelling.models import QualityFlag, QualityFlagKind
from app.studies.enums import BonusRule, Outcome
from app.studies.models import CrowdIdentity, Study, StudyParticipant
from app.studies.progress import Work, outcome_due, participants_work
from app.users.models import User

CENT = Decimal("0.01")
PAID_PER_MINUTE = (Outcome.completed, Outcome.no_work_left)


@dataclass(frozen=True)
class ParticipantRow:
    """One participant of a study, for paying them."""

    participant_id: str
    platform_study_id: str
    session_id: str
    username: str
    arrived_at: datetime
    finished_at: datetime | None
    images: int
    active_seconds: float
    gold_answered: int
    gold_correct: int
    gold_accuracy: float | None
    outcome: Outcome | None
    bonus: Decimal


def bonus(study: Study, work: Work, outcome: Outcome | None) -> Decimal:
    """The participant's bonus by the study's rule (the module's formulas), in cents."""
    if study.bonus_rule == BonusRule.per_image and outcome == Outcome.completed:
        extra = max(0, min(work.images, study.max_images) - study.required_images)
        return (study.bonus_rate * extra).quantize(CENT, ROUND_HALF_UP)
    if study.bonus_rule == BonusRule.per_minute and outcome in PAID_PER_MINUTE:
        minutes = Decimal(repr(work.active_seconds)) / 60
        return (study.bonus_rate * minutes).quantize(CENT, ROUND_HALF_UP)
    return Decimal("0.00")


def participant_rows(*, db_session: Session, study: Study, now: datetime) -> list[ParticipantRow]:
    """Every participant of the study in the order they arrived, with their work and bonus. The outcome of
    one still labelling is the one due without knowing what is left for them: screened_out while paused,
    and what their work reached once the time limit has passed (app.studies.progress.outcome_due)."""
    found = db_session.execute(
        select(StudyParticipant, CrowdIdentity.participant_id, User.username)
        .join(User, User.id == StudyParticipant.user_id)
        .join(
            CrowdIdentity,
            (CrowdIdentity.user_id == StudyParticipant.user_id) & (CrowdIdentity.platform == study.platform),
        )
        .where(StudyParticipant.study_id == study.id)
        .order_by(StudyParticipant.arrived_at, StudyParticipant.id)
    ).all()
    work = participants_work(db_session, study)
    paused = set(
        db_session.scalars(
            select(QualityFlag.user_id).where(
                QualityFlag.competition_id == study.competition_id,
                QualityFlag.kind == QualityFlagKind.gold,
                QualityFlag.decision.is_(None),
            )
        )
    )
    rows = []
    for participant, participant_id, username in found:
        done = work.get(participant.id, Work())
        outcome = outcome_due(study, participant, done, participant.user_id in paused, now, None)
        rows.append(
            ParticipantRow(
                participant_id=participant_id,
                platform_study_id=participant.platform_study_id,
                session_id=participant.session_id,
                username=username,
                arrived_at=participant.arrived_at,
                finished_at=participant.finished_at,
                images=done.images,
                active_seconds=done.active_seconds,
                gold_answered=done.gold_answered,
                gold_correct=done.gold_correct,
                gold_accuracy=done.gold_accuracy,
                outcome=outcome,
                bonus=bonus(study, done, outcome),
            )
        )
    return rows


def participants_csv(rows: list[ParticipantRow]) -> str:
    """The rows as CSV with a header (text a spreadsheet would run as a formula starts with an apostrophe;
    empty gold_accuracy: no gold answer; empty outcome: still labelling)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(ParticipantRow.__dataclass_fields__), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({name: neutralised(_cell(value)) for name, value in vars(row).items()})
    return buffer.getvalue()


def _cell(value: object) -> object:
    """A value as its CSV cell: times in ISO 8601, an outcome by name, nothing for None."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Outcome):
        return value.value
    return "" if value is None else value


def bonus_file(rows: list[ParticipantRow]) -> str:
    """The platform's bulk bonus file: `participant_id,amount` a line for each bonus above zero, no header
    (Prolific takes it pasted as it is, amounts with two decimals)."""
    return "".join(f"{row.participant_id},{row.bonus}\n" for row in rows if row.bonus > 0)
