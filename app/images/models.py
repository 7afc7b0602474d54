"""Content-addressed images and their membership in competitions."""

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, utcnow


class Image(Base):
    """An image file stored once by its SHA-256; width and height are after EXIF orientation."""

    __tablename__ = "images"

    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    format: Mapped[str] = mapped_column(String(8))
    width: Mapped[int]
    height: Mapped[int]
    bytes: Mapped[int] = mapped_column(Integer)
    original_name: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CompetitionImage(Base):
    """An image in a competition's corpus at a stable ordinal: the index into every prediction array."""

    __tablename__ = "competition_images"
    __table_args__ = (UniqueConstraint("competition_id", "ordinal"),)

    competition_id: Mapped[int] = mapped_column(
        ForeignKey("competitions.id", ondelete="CASCADE"), primary_key=True
    )
    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="RESTRICT"), primary_key=True, index=True
    )
    ordinal: Mapped[int]
    excluded: Mapped[bool] = mapped_column(default=False)
    excluded_reason: Mapped[str | None] = mapped_column(String(255))
    added_at: Mapped[datetime] = mapped_column(default=utcnow)
