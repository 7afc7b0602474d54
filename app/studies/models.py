"""Crowd studies: a study of a competition with its secret link, completion codes, limits and bonus rule;
the platform ids accounts are bound to; and each participant's arrival and outcome."""

from datetime import datetime
from decimal import Decimal

from sqlalchemy import CheckConstraint, ForeignKey, Index, Numeric, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, str_enum, utcnow
from app.studies.enums import BonusRule, Outcome


class Study(Base):
    """A study a lab runs on a crowd platform for one competition: the platform and the names of its query
    parameters, the hash of the secret link's token, the completion URL (with {code}) and a code per
    outcome, the images a participant must answer and at most may, the minutes they have, the consent
    text, how many participants it takes, and the bonus rule with its rate."""

    __tablename__ = "studies"
    __table_args__ = (
        CheckConstraint("required_images >= 1", name="required_images_positive"),
        CheckConstraint("max_images >= required_images", name="max_images_at_least_required"),
        CheckConstraint("time_limit_minutes >= 1", name="time_limit_positive"),
        CheckConstraint("max_participants >= 1", name="max_participants_positive"),
        CheckConstraint("bonus_rate >= 0", name="bonus_rate_not_negative"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    platform: Mapped[str] = mapped_column(String(32))
    """prolific, or the name of another platform (its parameter names are then the admin's)."""
    participant_parameter: Mapped[str] = mapped_column(String(64))
    study_parameter: Mapped[str] = mapped_column(String(64))
    session_parameter: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    """SHA-256 of the secret in the study's link: the link is shown when made, never stored."""
    completion_url: Mapped[str] = mapped_column(String(2000))
    completed_code: Mapped[str] = mapped_column(String(64))
    no_work_left_code: Mapped[str] = mapped_column(String(64))
    screened_out_code: Mapped[str] = mapped_column(String(64))
    timed_out_code: Mapped[str] = mapped_column(String(64))
    required_images: Mapped[int]
    max_images: Mapped[int]
    time_limit_minutes: Mapped[int]
    max_participants: Mapped[int]
    consent_text: Mapped[str] = mapped_column(Text)
    bonus_rule: Mapped[BonusRule] = mapped_column(str_enum(BonusRule), default=BonusRule.none)
    bonus_rate: Mapped[Decimal] = mapped_column(Numeric(10, 4), default=Decimal(0))
    """Per image beyond the required ones, or per active minute, in the platform's currency."""
    is_open: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CrowdIdentity(Base):
    """A person's id on a crowd platform, bound to the one account it signs in to: the same id through any
    study of any competition is the same annotator (personal data: deleted with the last study that
    holds it)."""

    __tablename__ = "crowd_identities"
    __table_args__ = (UniqueConstraint("platform", "participant_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    platform: Mapped[str] = mapped_column(String(32))
    participant_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), unique=True)


class StudyParticipant(Base):
    """A person who consented to a study: their account, the platform's study and session ids they came
    with, when they consented (their work counts from then) and when and how they left."""

    __tablename__ = "study_participants"
    __table_args__ = (
        UniqueConstraint("study_id", "user_id"),
        Index("ix_study_participants_study_arrived", "study_id", "arrived_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    platform_study_id: Mapped[str] = mapped_column(String(64))
    session_id: Mapped[str] = mapped_column(String(64))
    arrived_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    outcome: Mapped[Outcome | None] = mapped_column(str_enum(Outcome))
