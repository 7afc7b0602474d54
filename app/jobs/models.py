"""Leased jobs: predict a shard of images with one classifier, or select the top-k images of a pair."""

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, str_enum, utcnow
from app.jobs.enums import JobKind, JobStatus


class Job(Base):
    """A unit of worker work, claimed under a lease that expires unless the holder heartbeats."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_lease", "status", "lease_expires_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(ForeignKey("competitions.id", ondelete="CASCADE"), index=True)
    kind: Mapped[JobKind] = mapped_column(str_enum(JobKind))
    key: Mapped[str] = mapped_column(String(200), unique=True)
    classifier_id: Mapped[int] = mapped_column(ForeignKey("classifiers.id", ondelete="CASCADE"), index=True)
    other_classifier_id: Mapped[int | None] = mapped_column(ForeignKey("classifiers.id", ondelete="CASCADE"))
    shard_start: Mapped[int | None]
    shard_end: Mapped[int | None]
    status: Mapped[JobStatus] = mapped_column(str_enum(JobStatus), default=JobStatus.queued)
    attempts: Mapped[int] = mapped_column(default=0)
    max_attempts: Mapped[int] = mapped_column(default=3)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    progress_done: Mapped[int] = mapped_column(default=0)
    progress_total: Mapped[int] = mapped_column(default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    @property
    def shard(self) -> tuple[int, int]:
        """A predict job's ordinals [start, end)."""
        if self.shard_start is None or self.shard_end is None:
            raise ValueError(f"job {self.id} is a {self.kind.value} job: it has no shard")
        return self.shard_start, self.shard_end

    @property
    def classifier_b_id(self) -> int:
        """A select job's second classifier (classifier_id is the first)."""
        if self.other_classifier_id is None:
            raise ValueError(f"job {self.id} is a {self.kind.value} job: it has no classifier pair")
        return self.other_classifier_id


class WorkerSighting(Base):
    """When a worker last asked for work or sent a heartbeat, by the name it gives (admin pages and `mad
    jobs` say when none has been seen for a while)."""

    __tablename__ = "worker_sightings"

    worker: Mapped[str] = mapped_column(String(200), primary_key=True)
    last_seen_at: Mapped[datetime]
