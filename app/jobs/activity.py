"""What the job system is doing now, for monitoring: jobs by kind and state, and the workers' heartbeats."""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.jobs.enums import JobStatus
from app.jobs.models import Job


@dataclass(frozen=True)
class WorkerActivity:
    """Workers holding a live lease, and the age of the newest heartbeat (None before any)."""

    leasing_workers: int
    newest_heartbeat_age_s: float | None


def job_counts(*, db_session: Session) -> dict[tuple[str, str], int]:
    """Jobs per (kind, status)."""
    rows = db_session.execute(select(Job.kind, Job.status, func.count()).group_by(Job.kind, Job.status))
    return {(str(kind), str(status)): count for kind, status, count in rows}


def worker_activity(*, db_session: Session, now: datetime | None = None) -> WorkerActivity:
    """Distinct lease owners of running jobs whose lease has not expired, and now − max(heartbeat_at)."""
    now = now or utcnow()
    leasing = db_session.execute(
        select(func.count(func.distinct(Job.lease_owner))).where(
            Job.status == JobStatus.running, Job.lease_expires_at > now
        )
    ).scalar_one()
    newest = db_session.scalar(select(func.max(Job.heartbeat_at)))
    return WorkerActivity(leasing, None if newest is None else (now - newest).total_seconds())
