"""Classifiers taking part in a competition and where their predictions come from."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.db.base import Base, str_enum, utcnow


class Classifier(Base):
    """One competing model f_i; its predictions live in dense arrays on disk, not in the database."""

    __tablename__ = "classifiers"
    __table_args__ = (UniqueConstraint("competition_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    source: Mapped[ClassifierSource] = mapped_column(str_enum(ClassifierSource, length=32))
    architecture: Mapped[str | None] = mapped_column(String(200))
    pretrained_tag: Mapped[str | None] = mapped_column(String(200))
    weights_sha256: Mapped[str | None] = mapped_column(String(64))
    weights_format: Mapped[str | None] = mapped_column(String(16))
    data_config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    reported_accuracy: Mapped[float | None]
    status: Mapped[ClassifierStatus] = mapped_column(
        str_enum(ClassifierStatus), default=ClassifierStatus.pending
    )
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    retired_at: Mapped[datetime | None]
