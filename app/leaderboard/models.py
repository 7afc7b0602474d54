"""Frozen leaderboards: a snapshot's numbers are stored once and never change."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, utcnow


class LeaderboardSnapshot(Base):
    """A competition's leaderboard as it stood when an admin froze it, served at /leaderboards/{slug}."""

    __tablename__ = "leaderboard_snapshots"

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"), index=True)
    slug: Mapped[str] = mapped_column(String(80), unique=True)
    note: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    leaderboard: Mapped[dict[str, Any]] = mapped_column(JSON)
