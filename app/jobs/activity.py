"""What the job system is doing now, for monitoring: jobs by kind and state, and the workers' heartbeats (as
Prometheus gauges read at scrape time, app/web/metrics.py)."""

from dataclasses import dataclass
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily
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


def job_gauges(db_session: Session) -> list[GaugeMetricFamily]:
    """Jobs by kind and state, workers holding an unexpired lease, and the newest heartbeat's age."""
    jobs = GaugeMetricFamily("mad_jobs", "Jobs by kind and state", labels=["kind", "state"])
    for (kind, state), count in sorted(job_counts(db_session=db_session).items()):
        jobs.add_metric([kind, state], count)
    workers = worker_activity(db_session=db_session)
    gauges = [
        jobs,
        GaugeMetricFamily(
            "mad_leasing_workers", "Workers holding an unexpired job lease", value=workers.leasing_workers
        ),
    ]
    if workers.newest_heartbeat_age_s is not None:
        gauges.append(
            GaugeMetricFamily(
                "mad_newest_heartbeat_age_seconds",
                "Seconds since a worker last took or renewed a lease",
                value=workers.newest_heartbeat_age_s,
            )
        )
    return gauges
