"""Content-addressed images and their membership in competitions."""

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, utcnow


class Image(Base):
    """An image file stored once by its SHA-256; width and height are after EXIF orientation.

    Provenance comes from the import that first stored it: source_uri is where it was read (a path, an
    archive member, an s3:// key or a URL; a re-run of an import skips the uris it finds), source_url,
    license and author come from a manifest. phash is its 64-bit perceptual hash (imagehash's pHash, as
    a signed integer), which finds near-duplicates.
    """

    __tablename__ = "images"

    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    format: Mapped[str] = mapped_column(String(8))
    width: Mapped[int]
    height: Mapped[int]
    bytes: Mapped[int] = mapped_column(Integer)
    original_name: Mapped[str] = mapped_column(String(255))
    source_uri: Mapped[str | None] = mapped_column(String(2048), index=True)
    source_url: Mapped[str | None] = mapped_column(String(2048))
    license: Mapped[str | None] = mapped_column(String(255))
    author: Mapped[str | None] = mapped_column(String(255))
    phash: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CompetitionImage(Base):
    """An image in a competition's corpus at a stable ordinal: the index into every prediction array."""

    __tablename__ = "competition_images"
    __table_args__ = (
        UniqueConstraint("competition_id", "ordinal"),
        # Each select job lists the excluded few of a competition's (perhaps a million) images.
        Index(
            "ix_competition_images_excluded",
            "competition_id",
            postgresql_where=text("excluded"),
            sqlite_where=text("excluded"),
        ),
    )

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
