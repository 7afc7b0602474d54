"""Request and response bodies of crowd studies: a study's settings, its secret link, its participants for
paying them, and a participant's own progress and completion code."""

from datetime import datetime
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.studies.enums import BonusRule, Outcome

PLATFORM_PATTERN = r"^[a-z][a-z0-9-]{0,31}$"
PARAMETER_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"
CODE_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_IMAGES = 10_000
MAX_MINUTES = 7 * 24 * 60
MAX_PARTICIPANTS = 100_000
MAX_CONSENT = 20_000
BonusRate = Annotated[
    Decimal,
    Field(
        ge=0,
        le=1000,
        max_digits=8,
        decimal_places=4,
        description="The bonus per image beyond the required ones (per_image) or per minute of active time "
        "(per_minute), in the platform's currency: 0.05 is 5 pence on a study paid in pounds.",
    ),
]


class CompletionCodes(BaseModel):
    """The platform's completion code for each outcome (each triggers the action set for it there: approve,
    return, reject); four different codes."""

    completed: str = Field(pattern=CODE_PATTERN, examples=["C1A2B3C4"])
    no_work_left: str = Field(pattern=CODE_PATTERN, examples=["CNOWORK1"])
    screened_out: str = Field(pattern=CODE_PATTERN, examples=["CSCREEN1"])
    timed_out: str = Field(pattern=CODE_PATTERN, examples=["CTIMEOUT"])


class StudyCreate(BaseModel):
    """A new study of a competition on a crowd platform (README, "Running a Prolific study")."""

    competition_id: int
    name: str = Field(min_length=1, max_length=100, examples=["Pilot, 20 images"])
    platform: str = Field(
        default="prolific",
        pattern=PLATFORM_PATTERN,
        description="prolific, or a short name of another platform (mturk, sona, …): its participants' ids "
        "are told apart from Prolific's, and its parameter names and completion URL must be given.",
    )
    participant_parameter: str | None = Field(
        default=None,
        pattern=PARAMETER_PATTERN,
        description="The query parameter holding the participant's id (Prolific: PROLIFIC_PID).",
    )
    study_parameter: str | None = Field(
        default=None, pattern=PARAMETER_PATTERN, description="… the platform's study id (STUDY_ID)."
    )
    session_parameter: str | None = Field(
        default=None, pattern=PARAMETER_PATTERN, description="… the participant's session id (SESSION_ID)."
    )
    completion_url: str | None = Field(
        default=None,
        max_length=2000,
        description="Where participants are sent when they leave, {code} standing for the outcome's code "
        "(Prolific: https://app.prolific.com/submissions/complete?cc={code}); https, or http on this "
        "machine only.",
    )
    codes: CompletionCodes
    required_images: int = Field(ge=1, le=MAX_IMAGES, description="Images a participant answers to complete.")
    max_images: int | None = Field(
        default=None,
        ge=1,
        le=MAX_IMAGES,
        description="The most a participant may answer (default: the required ones); those beyond the "
        "required ones earn the per_image bonus.",
    )
    time_limit_minutes: int = Field(
        default=60,
        ge=1,
        le=MAX_MINUTES,
        description="Minutes from consent after which a participant is sent back with what they reached.",
    )
    max_participants: int = Field(ge=1, le=MAX_PARTICIPANTS, description="Participants the study takes.")
    consent_text: str = Field(
        min_length=1,
        max_length=MAX_CONSENT,
        description="Shown before the first image, with a button to agree (plain text; blank lines part "
        "paragraphs).",
    )
    bonus_rule: BonusRule = BonusRule.none
    bonus_rate: BonusRate = Decimal(0)


class StudyUpdate(BaseModel):
    """What an admin may change while a study runs (its competition, platform and parameters stay)."""

    name: str | None = Field(default=None, min_length=1, max_length=100)
    is_open: bool | None = Field(default=None, description="false: no new participants (those in go on).")
    completion_url: str | None = Field(default=None, max_length=2000)
    codes: CompletionCodes | None = None
    required_images: int | None = Field(default=None, ge=1, le=MAX_IMAGES)
    max_images: int | None = Field(default=None, ge=1, le=MAX_IMAGES)
    time_limit_minutes: int | None = Field(default=None, ge=1, le=MAX_MINUTES)
    max_participants: int | None = Field(default=None, ge=1, le=MAX_PARTICIPANTS)
    consent_text: str | None = Field(default=None, min_length=1, max_length=MAX_CONSENT)
    bonus_rule: BonusRule | None = None
    bonus_rate: BonusRate | None = None


class StudyRead(BaseModel):
    """A study as admins see it, with its participants counted by outcome (unfinished ones under null)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    competition_id: int
    name: str
    platform: str
    participant_parameter: str
    study_parameter: str
    session_parameter: str
    completion_url: str
    codes: CompletionCodes
    required_images: int
    max_images: int
    time_limit_minutes: int
    max_participants: int
    consent_text: str
    bonus_rule: BonusRule
    bonus_rate: Decimal
    is_open: bool
    created_at: datetime
    participants: int
    outcomes: dict[str, int] = Field(
        examples=[{"completed": 40, "screened_out": 2, "unfinished": 3}],
        description="Participants per outcome; `unfinished` counts those still labelling.",
    )


class StudyLinkRead(BaseModel):
    """The study's secret link, shown once: give it to the platform as the study's URL."""

    url: str = Field(description="The link; the platform adds the participant's ids as query parameters.")
    url_with_parameters: str = Field(
        description="The same link with the parameters spelled out in Prolific's placeholders (other "
        "platforms: replace each {{%…%}} with theirs)."
    )


class StudyCreated(StudyRead, StudyLinkRead):
    """A new study with its link (shown this once: only a hash of its secret is kept)."""


class ParticipantRead(BaseModel):
    """One participant of a study, for paying them: their platform ids, the account that labelled (its
    username is no personal data), their work in the study by the server's clock and their bonus."""

    participant_id: str = Field(description="The platform's id of the person (personal data).")
    platform_study_id: str
    session_id: str
    username: str
    arrived_at: datetime
    finished_at: datetime | None
    images: int = Field(description="Images answered in the study (with at least one answer standing).")
    active_seconds: float = Field(
        description="Σ seconds per answer by the server's clock, each capped at 60 s."
    )
    gold_answered: int
    gold_correct: int
    gold_accuracy: float | None
    outcome: Outcome | None = Field(
        description="How they left; for one still labelling, screened_out while paused and the outcome of "
        "their work once the time limit has passed; else null."
    )
    bonus: Decimal = Field(description="By the study's bonus rule, rounded to cents (half up).")


class ParticipationRead(BaseModel):
    """A participant's own progress in a study, read by the labelling page after each image."""

    study_id: int
    required_images: int
    max_images: int
    images: int
    deadline: datetime
    outcome: Outcome | None = Field(description="How they left, once they have.")
    outcome_due: Outcome | None = Field(description="How they leave now (null: there is work to do).")
    may_finish: bool = Field(
        description="Whether they may leave now as completed (the required images done)."
    )


class FinishRead(BaseModel):
    """The participant's outcome, its completion code and the platform's completion URL carrying it."""

    outcome: Outcome
    code: str
    completion_url: str
