"""Studies as admins run them: open one for a competition with its secret link, change it, close it, give it
a new link, and delete it with every platform id it holds.

A study's link is /join/TOKEN: only the SHA-256 of the token is stored (as an invitation's), so the link is
shown once, and a leaked one is replaced by a new one (the old stops working). The platform adds each
participant's ids to it as query parameters (app/studies/arrivals.py).
"""

import secrets
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition, CompetitionMember
from app.competitions.service import get_competition
from app.errors import InvalidInput, NotFound
from app.labelling.quality_control.annotators import deactivate
from app.security import hash_api_token
from app.settings import is_loopback
from app.studies.enums import BonusRule, Outcome
from app.studies.models import CrowdIdentity, Study, StudyParticipant
from app.studies.schemas import CompletionCodes, StudyCreate, StudyUpdate
from app.users.models import User

JOIN_PATH = "/join/{token}"
PROLIFIC = "prolific"
PROLIFIC_PARAMETERS = ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID")
PROLIFIC_COMPLETION_URL = "https://app.prolific.com/submissions/complete?cc={code}"
CODE_FIELD = "{code}"


@dataclass(frozen=True)
class StudyLink:
    """A study's secret link, bare and with its parameters in Prolific's placeholders."""

    url: str
    url_with_parameters: str


def create_study(*, db_session: Session, spec: StudyCreate, base_url: str) -> tuple[Study, StudyLink]:
    """A new open study of the competition and its link (shown once); the platform's parameter names and
    completion URL are Prolific's unless given (another platform must give them)."""
    get_competition(db_session=db_session, competition_id=spec.competition_id)
    parameters = _parameters(spec)
    completion_url = spec.completion_url or (PROLIFIC_COMPLETION_URL if spec.platform == PROLIFIC else None)
    if completion_url is None:
        raise InvalidInput(f"a study on {spec.platform} needs its completion_url, with {CODE_FIELD} in it")
    token = secrets.token_urlsafe(24)
    study = Study(
        competition_id=spec.competition_id,
        name=spec.name,
        platform=spec.platform,
        participant_parameter=parameters[0],
        study_parameter=parameters[1],
        session_parameter=parameters[2],
        token_hash=hash_api_token(token),
        completion_url=completion_url,
        required_images=spec.required_images,
        max_images=spec.max_images or spec.required_images,
        time_limit_minutes=spec.time_limit_minutes,
        max_participants=spec.max_participants,
        consent_text=spec.consent_text,
        bonus_rule=spec.bonus_rule,
        bonus_rate=spec.bonus_rate,
    )
    _set_codes(study, spec.codes)
    check_study(study)
    db_session.add(study)
    db_session.flush()
    return study, study_link(study, base_url, token)


def _parameters(spec: StudyCreate) -> tuple[str, str, str]:
    """The query parameters of the participant's, the study's and the session's ids: Prolific's unless
    given; another platform must name all three, each different."""
    given = (spec.participant_parameter, spec.study_parameter, spec.session_parameter)
    if spec.platform != PROLIFIC and None in given:
        raise InvalidInput(
            f"a study on {spec.platform} names its query parameters: participant_parameter, "
            "study_parameter and session_parameter"
        )
    participant, study, session = (
        name or default for name, default in zip(given, PROLIFIC_PARAMETERS, strict=True)
    )
    if len({participant, study, session}) != 3:
        raise InvalidInput(f"the three query parameters must differ, not {participant}, {study}, {session}")
    return participant, study, session


def _set_codes(study: Study, codes: CompletionCodes) -> None:
    """Set the study's completion code of each outcome; four different codes (else InvalidInput)."""
    given = codes.model_dump()
    if len(set(given.values())) != len(given):
        raise InvalidInput("each outcome needs a completion code of its own: the four codes must differ")
    for outcome, code in given.items():
        setattr(study, f"{outcome}_code", code)


def check_study(study: Study) -> None:
    """InvalidInput unless the study's settings fit together: a completion URL that can carry the code to
    a site participants trust, an upper limit not below the required images, a bonus rate with a rule."""
    if study.completion_url.count(CODE_FIELD) != 1:
        raise InvalidInput(f"the completion_url must hold {CODE_FIELD} once, where the code goes")
    if not _secure_address(study.completion_url):
        raise InvalidInput("the completion_url must be an https:// address (http:// only on this machine)")
    if study.max_images < study.required_images:
        raise InvalidInput(
            f"max_images ({study.max_images}) is below required_images ({study.required_images})"
        )
    if study.bonus_rule == BonusRule.none and study.bonus_rate:
        raise InvalidInput("a bonus_rate needs a bonus_rule: per_image or per_minute")


def _secure_address(url: str) -> bool:
    """Whether the URL is an https:// address, or an http:// one on this machine."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return False
    return bool(host) and (parts.scheme == "https" or (parts.scheme == "http" and is_loopback(host or "")))


def study_link(study: Study, base_url: str, token: str) -> StudyLink:
    """The study's link at base_url, bare and with Prolific's placeholders for its three parameters."""
    url = base_url.rstrip("/") + JOIN_PATH.format(token=token)
    names = (study.participant_parameter, study.study_parameter, study.session_parameter)
    placeholders = {
        name: f"{{{{%{default}%}}}}" for name, default in zip(names, PROLIFIC_PARAMETERS, strict=True)
    }
    return StudyLink(url, url + "?" + urlencode(placeholders, safe="{}%"))


def new_link(*, db_session: Session, study: Study, base_url: str) -> StudyLink:
    """A new secret link for the study: the old one stops working (a leaked link), participants keep their
    accounts and come back through the new one."""
    token = secrets.token_urlsafe(24)
    study.token_hash = hash_api_token(token)
    db_session.flush()
    return study_link(study, base_url, token)


def get_study(*, db_session: Session, study_id: int) -> Study:
    """The study with this id, or NotFound."""
    study = db_session.get(Study, study_id)
    if study is None:
        raise NotFound(f"no study with id {study_id}")
    return study


def list_studies(*, db_session: Session, competition_id: int | None = None) -> list[Study]:
    """Every study (of one competition, when given), newest first."""
    query = select(Study).order_by(Study.id.desc())
    if competition_id is not None:
        query = query.where(Study.competition_id == competition_id)
    return list(db_session.scalars(query))


def update_study(*, db_session: Session, study: Study, change: StudyUpdate) -> Study:
    """Apply the fields given (a study's competition, platform and parameters stay); the result must fit
    together as a new study's settings do."""
    fields = change.model_dump(exclude_unset=True, exclude={"codes"})
    for name, value in fields.items():
        if value is None:
            raise InvalidInput(f"{name} cannot be null")
        setattr(study, name, value)
    if change.codes is not None:
        _set_codes(study, change.codes)
    check_study(study)
    db_session.flush()
    return study


def outcome_counts(*, db_session: Session, study: Study) -> tuple[int, dict[str, int]]:
    """The study's participants, and their count per recorded outcome (`unfinished` for none yet)."""
    counts = {
        (outcome.value if outcome else "unfinished"): count
        for outcome, count in db_session.execute(
            select(StudyParticipant.outcome, func.count())
            .where(StudyParticipant.study_id == study.id)
            .group_by(StudyParticipant.outcome)
        ).all()
    }
    return sum(counts.values()), counts


def codes_of(study: Study) -> CompletionCodes:
    """The study's completion code per outcome."""
    return CompletionCodes(**{outcome.value: getattr(study, f"{outcome.value}_code") for outcome in Outcome})


def completion(study: Study, outcome: Outcome) -> tuple[str, str]:
    """The study's code for the outcome, and its completion URL carrying it."""
    code = getattr(study, f"{outcome.value}_code")
    return code, study.completion_url.replace(CODE_FIELD, code)


def delete_study(*, db_session: Session, study: Study) -> int:
    """Delete the study with its participants' platform ids (personal data, on request): each participant's
    membership of the competition ends unless another study of it holds them, and an account no other study
    holds loses its platform id and is deactivated (its votes stay, under a username that names no one).
    Returns how many participants the study had."""
    users = list(
        db_session.scalars(
            select(User)
            .join(StudyParticipant, StudyParticipant.user_id == User.id)
            .where(StudyParticipant.study_id == study.id)
            .order_by(User.id)
        )
    )
    competition = db_session.get_one(Competition, study.competition_id)
    db_session.delete(study)
    db_session.flush()
    for user in users:
        _forget_participant(db_session, competition, user)
    db_session.flush()
    return len(users)


def _forget_participant(db_session: Session, competition: Competition, user: User) -> None:
    """After a study's deletion: end the account's membership where no study of the competition holds it,
    and its platform id and sign-in where no study holds it at all."""
    studies = list(
        db_session.scalars(
            select(Study.competition_id)
            .join(StudyParticipant, StudyParticipant.study_id == Study.id)
            .where(StudyParticipant.user_id == user.id)
        )
    )
    if competition.id not in studies:
        member = db_session.get(CompetitionMember, (competition.id, user.id))
        if member is not None:
            db_session.delete(member)
    if not studies:
        identity = db_session.scalar(select(CrowdIdentity).where(CrowdIdentity.user_id == user.id))
        if identity is not None:
            db_session.delete(identity)
        if user.is_active:
            deactivate(db_session=db_session, user=user)
