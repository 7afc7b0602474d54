"""Arriving through a study's link: the platform's ids read from the query, and, after consent, an annotator
account bound to (platform, participant id) without a password, a member of the study's competition only.

The study's secret link is what admits; the ids in its query are untrusted input, checked against the
platform's format, and an id only ever reaches the one account bound to it. The same id through two
studies is one account (so one person cannot fill a panel twice). New participants of a study are admitted
one at a time (its row locked), within its participant limit and at most `per_minute` a minute. Their
messages are for the participant and are translated where they are shown (app.i18n.N_).
"""

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.competitions.members import add_member
from app.competitions.models import Competition
from app.errors import Conflict, Forbidden, InvalidInput, MadError, NotFound
from app.i18n import N_
from app.security import hash_api_token
from app.studies.models import CrowdIdentity, Study, StudyParticipant
from app.studies.progress import Work, finish, outcome_due, participants_work
from app.studies.service import PROLIFIC
from app.users.models import Role, User
from app.users.service import add_user_under_free_name

PROLIFIC_ID = re.compile(r"[0-9a-f]{24}")
"""A Prolific id (participant, study, session): 24 hexadecimal digits."""
PLATFORM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""Another platform's id: letters, digits, _ and - (not first), at most 64."""
RATE_WINDOW = timedelta(minutes=1)
TOO_MANY_REQUESTS = 429

UNKNOWN_LINK = N_(
    "This study link does not work: check that it was copied whole, or open the study again from the site "
    "that sent you."
)
MISSING_ID = N_(
    "The link lacks your {parameter}, or it is not in the form {platform} gives: open the study again "
    "from {platform}."
)
CLOSED = N_("This study is closed: it takes no new participants. Thank you for your interest.")
FULL = N_("This study has all the participants it needs. Thank you for your interest.")
BUSY = N_("Many people are joining this study right now: please try again in {seconds} seconds.")
DEACTIVATED = N_("Your account here is deactivated: please contact the researchers through {platform}.")
OTHER_STUDY = N_(
    "You are taking part in another study of this competition and have not finished it: go on with it first."
)


class ArrivalRefused(MadError):
    """Why a participant is not admitted, with its HTTP status: the message (marked with N_) is filled with
    `values` in English here, and in the participant's language where a page shows it (`template`)."""

    code = "not_admitted"

    def __init__(self, template: str, status_code: int, **values: object):
        super().__init__(template.format(**values))
        self.template, self.values, self.status_code = template, values, status_code


@dataclass(frozen=True)
class Arrival:
    """The ids a participant's link carries: theirs, the platform's study's and their session's."""

    participant_id: str
    platform_study_id: str
    session_id: str


def study_of_link(*, db_session: Session, token: str, lock: bool = False) -> Study:
    """The study whose link holds this token (locked for an admission); refused (404) when none does."""
    query = select(Study).where(Study.token_hash == hash_api_token(token))
    study = db_session.scalar(query.with_for_update() if lock else query)
    if study is None:
        raise ArrivalRefused(UNKNOWN_LINK, NotFound.status_code)
    return study


def read_arrival(study: Study, query: Mapping[str, str]) -> Arrival:
    """The ids of the link's query, each checked against the platform's format; refused (422) naming the
    first one missing or malformed. A value is never echoed: it may be a person's id."""
    pattern = PROLIFIC_ID if study.platform == PROLIFIC else PLATFORM_ID
    ids = []
    for parameter in (study.participant_parameter, study.study_parameter, study.session_parameter):
        value = query.get(parameter, "")
        if not pattern.fullmatch(value):
            raise ArrivalRefused(
                MISSING_ID, InvalidInput.status_code, parameter=parameter, platform=platform_name(study)
            )
        ids.append(value)
    return Arrival(*ids)


def platform_name(study: Study) -> str:
    """The platform as participants know it."""
    return "Prolific" if study.platform == PROLIFIC else study.platform


def returning(*, db_session: Session, study: Study, arrival: Arrival) -> StudyParticipant | None:
    """The participant this id already is in the study, if any."""
    return db_session.scalar(
        select(StudyParticipant)
        .join(CrowdIdentity, CrowdIdentity.user_id == StudyParticipant.user_id)
        .where(
            StudyParticipant.study_id == study.id,
            CrowdIdentity.platform == study.platform,
            CrowdIdentity.participant_id == arrival.participant_id,
        )
    )


def admit(
    *, db_session: Session, token: str, arrival: Arrival, now: datetime, per_minute: int
) -> tuple[StudyParticipant, User]:
    """The participant who consented, and their account: the one their id already is in the study (their
    session id updated), else a new participant of the open study within its limits. Refused
    (ArrivalRefused) when the study is closed, full, admitting too many at once, the account is
    deactivated, or the person has not finished another study of the competition."""
    study = study_of_link(db_session=db_session, token=token, lock=True)
    participant = returning(db_session=db_session, study=study, arrival=arrival)
    if participant is not None:
        participant.session_id = arrival.session_id
        user = db_session.get_one(User, participant.user_id)
        _check_active(study, user)
        return participant, user
    check_room(db_session=db_session, study=study, now=now, per_minute=per_minute)
    user = _account(db_session, study, arrival.participant_id)
    _check_active(study, user)
    _finish_or_refuse_elsewhere(db_session, study, user, now)
    participant = StudyParticipant(
        study_id=study.id,
        user_id=user.id,
        platform_study_id=arrival.platform_study_id,
        session_id=arrival.session_id,
        arrived_at=now,
    )
    db_session.add(participant)
    add_member(
        db_session=db_session, competition=db_session.get_one(Competition, study.competition_id), user=user
    )
    db_session.flush()
    return participant, user


def check_room(*, db_session: Session, study: Study, now: datetime, per_minute: int) -> None:
    """Refuse a new participant of a closed or full study, or beyond `per_minute` admitted in the last
    minute (with the seconds until the earliest of them leaves the window)."""
    if not study.is_open:
        raise ArrivalRefused(CLOSED, Conflict.status_code)
    taken = db_session.scalar(select(func.count()).where(StudyParticipant.study_id == study.id)) or 0
    if taken >= study.max_participants:
        raise ArrivalRefused(FULL, Conflict.status_code)
    recent = list(
        db_session.scalars(
            select(StudyParticipant.arrived_at)
            .where(StudyParticipant.study_id == study.id, StudyParticipant.arrived_at > now - RATE_WINDOW)
            .order_by(StudyParticipant.arrived_at.desc())
            .limit(per_minute)
        )
    )
    if len(recent) >= per_minute:
        seconds = max(1, round((recent[-1] + RATE_WINDOW - now).total_seconds()))
        raise ArrivalRefused(BUSY, TOO_MANY_REQUESTS, seconds=seconds)


def _check_active(study: Study, user: User) -> None:
    """Refuse an account an admin deactivated."""
    if not user.is_active:
        raise ArrivalRefused(DEACTIVATED, Forbidden.status_code, platform=platform_name(study))


def _account(db_session: Session, study: Study, participant_id: str) -> User:
    """The account bound to (platform, participant id), made now when there is none: an annotator without a
    password who labels only where they are a member, under a username that names nobody."""
    identity = db_session.scalar(
        select(CrowdIdentity).where(
            CrowdIdentity.platform == study.platform, CrowdIdentity.participant_id == participant_id
        )
    )
    if identity is not None:
        return db_session.get_one(User, identity.user_id)
    wanted = f"{study.platform}-{secrets.token_hex(5)}"
    user = add_user_under_free_name(db_session=db_session, wanted=wanted, role=Role.annotator)
    user.member_competitions_only = True
    db_session.add(CrowdIdentity(platform=study.platform, participant_id=participant_id, user_id=user.id))
    db_session.flush()
    return user


def _finish_or_refuse_elsewhere(db_session: Session, study: Study, user: User, now: datetime) -> None:
    """Before the person joins this study: finish their participation in another study of the same
    competition whose time is up; refuse while one still runs (their work would count twice)."""
    others = db_session.execute(
        select(Study, StudyParticipant)
        .join(StudyParticipant, StudyParticipant.study_id == Study.id)
        .where(
            Study.competition_id == study.competition_id,
            Study.id != study.id,
            StudyParticipant.user_id == user.id,
            StudyParticipant.outcome.is_(None),
        )
    ).all()
    for other, participant in others:
        work = participants_work(db_session, other, [participant.id])
        if outcome_due(other, participant, work.get(participant.id, Work()), False, now, None) is None:
            raise ArrivalRefused(OTHER_STUDY, Conflict.status_code)
        finish(db_session=db_session, study=other, user=user, now=now)
