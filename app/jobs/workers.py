"""Worker sightings: when each worker last asked for work or kept a lease alive, and whether any is about.

A worker asks for work every few seconds when idle and sends heartbeats every third of a lease while it
works, so one not seen for a whole lease (MAD_JOB_LEASE_S) has stopped, and its jobs go to others.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.statements import conflict_insert
from app.jobs.enums import JobStatus
from app.jobs.models import Job, WorkerSighting

SHOWN_WORKERS = 10
"""The most recently seen workers listed; older ones only count."""


@dataclass(frozen=True)
class WorkerPresence:
    """The workers seen lately (name, when), and a warning when none has been seen for a lease or more."""

    workers: list[tuple[str, datetime]]
    warning: str | None


def seen(*, db_session: Session, workers: Iterable[str], now: datetime) -> None:
    """Record that these workers asked for work or sent a heartbeat now."""
    for worker in sorted(set(workers)):
        insert = conflict_insert(db_session, WorkerSighting.__table__).values(worker=worker, last_seen_at=now)
        db_session.execute(
            insert.on_conflict_do_update(index_elements=["worker"], set_={"last_seen_at": now})
        )


def presence(*, db_session: Session, now: datetime, lost_after_s: int, jobs_waiting: int) -> WorkerPresence:
    """The latest sightings, and, when no worker was seen within lost_after_s, a warning that says since
    when and what waits for one."""
    sightings = db_session.execute(
        select(WorkerSighting.worker, WorkerSighting.last_seen_at)
        .order_by(WorkerSighting.last_seen_at.desc())
        .limit(SHOWN_WORKERS)
    ).all()
    workers = [(name, at) for name, at in sightings]
    if workers and now - workers[0][1] <= timedelta(seconds=lost_after_s):
        return WorkerPresence(workers, None)
    since = f"no worker seen for {ago(workers[0][1], now)}" if workers else "no worker has asked for work yet"
    waiting = {0: "no job waits", 1: "1 job waits"}.get(jobs_waiting, f"{jobs_waiting} jobs wait")
    return WorkerPresence(workers, f"{since[0].upper()}{since[1:]}; {waiting}: start one with `mad worker`.")


def about(*, db_session: Session, lost_after_s: int, jobs_waiting: int) -> dict:
    """presence() now, as the progress API shows it: each worker with how long ago it was seen."""
    now = utcnow()
    seen_lately = presence(
        db_session=db_session, now=now, lost_after_s=lost_after_s, jobs_waiting=jobs_waiting
    )
    return {
        "workers": [
            {"worker": name, "last_seen_at": at, "seen_ago": ago(at, now)} for name, at in seen_lately.workers
        ],
        "worker_warning": seen_lately.warning,
    }


def queued_count(*, db_session: Session) -> int:
    """Jobs queued anywhere, waiting for a worker."""
    return db_session.execute(select(func.count()).where(Job.status == JobStatus.queued)).scalar_one()


def ago(then: datetime, now: datetime) -> str:
    """'12 s', '4 min', '3 h', '2 d': how long ago, roughly."""
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
