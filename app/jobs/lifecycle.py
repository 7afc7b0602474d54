"""A classifier's jobs over its life: queued once it is registered, cancelled when it is retired.

Locks follow the order of app.jobs.service: competition, then jobs, then classifiers.
"""

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.competitions.service import lock_competition
from app.db.base import utcnow
from app.jobs.enums import JobStatus
from app.jobs.models import Job
from app.jobs.service import enqueue_predictions, enqueue_selections
from app.settings import Settings


def enqueue_classifier(*, db_session: Session, settings: Settings, classifier: Classifier) -> None:
    """Queue the classifier's predict jobs, or its select jobs when its predictions are already stored."""
    lock_competition(db_session=db_session, competition_id=classifier.competition_id)
    if classifier.status == ClassifierStatus.ready:
        enqueue_selections(
            db_session=db_session,
            competition_id=classifier.competition_id,
            max_attempts=settings.job_max_attempts,
        )
    else:
        enqueue_predictions(
            db_session=db_session,
            classifier=classifier,
            max_attempts=settings.job_max_attempts,
            shard_size=settings.predict_shard_size,
        )


def retire_classifier(*, db_session: Session, classifier: Classifier) -> Classifier:
    """Take a classifier out of the competition: it leaves the leaderboard, its pairs are ignored, and its
    queued or running jobs are cancelled (a worker still running one has its result refused)."""
    if classifier.status == ClassifierStatus.retired:
        return classifier
    lock_competition(db_session=db_session, competition_id=classifier.competition_id)
    jobs = db_session.scalars(  # locked before the classifier row: the lock order of app.jobs.service
        select(Job)
        .where(
            or_(Job.classifier_id == classifier.id, Job.other_classifier_id == classifier.id),
            Job.status.in_([JobStatus.queued, JobStatus.running]),
        )
        .order_by(Job.id)
        .with_for_update()
    ).all()
    now = utcnow()
    classifier.status = ClassifierStatus.retired
    classifier.retired_at = now
    for job in jobs:
        job.status = JobStatus.cancelled
        job.error = f"classifier {classifier.name!r} was retired"
        job.finished_at = now
        job.lease_expires_at = None
    db_session.flush()
    return classifier
