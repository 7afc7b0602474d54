"""A competition's progress: images predicted per classifier, pairs selected, jobs by status, workers seen."""

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.images.service import competition_image_count
from app.jobs import workers
from app.jobs.enums import JobKind, JobStatus
from app.jobs.models import Job
from app.jobs.schemas import PairSelectionRead
from app.jobs.selections import pair_selections


def competition_progress(*, db_session: Session, competition_id: int, lost_after_s: int) -> dict:
    """Images predicted per classifier, pairs selected out of all pairs (each with its diagnosis, and how
    many are empty or short of k), jobs by status, and the workers seen lately (a warning when none was
    within lost_after_s)."""
    n_images = competition_image_count(db_session=db_session, competition_id=competition_id)
    predicted = dict(
        db_session.execute(
            select(Job.classifier_id, func.sum(Job.shard_end - Job.shard_start))
            .where(
                Job.competition_id == competition_id,
                Job.kind == JobKind.predict,
                Job.status == JobStatus.done,
            )
            .group_by(Job.classifier_id)
        ).all()
    )
    classifiers = db_session.scalars(
        select(Classifier).where(Classifier.competition_id == competition_id).order_by(Classifier.id)
    ).all()
    active = [c for c in classifiers if c.status not in (ClassifierStatus.failed, ClassifierStatus.retired)]
    by_status = dict(
        db_session.execute(
            select(Job.status, func.count()).where(Job.competition_id == competition_id).group_by(Job.status)
        ).all()
    )
    pairs = pair_selections(
        db_session=db_session, competition=db_session.get_one(Competition, competition_id)
    )
    pairs_of: dict[int, list[PairSelectionRead]] = {c.id: [] for c in classifiers}
    for pair in pairs:
        pairs_of[pair.classifier_a_id].append(pair)
        pairs_of[pair.classifier_b_id].append(pair)
    pairs_selected = db_session.scalar(
        select(func.count()).where(
            Job.competition_id == competition_id, Job.kind == JobKind.select, Job.status == JobStatus.done
        )
    )
    return {
        "competition_id": competition_id,
        "images": n_images,
        "classifiers": [
            {
                "classifier_id": c.id,
                "name": c.name,
                "status": c.status.value,
                "images_predicted": n_images
                if c.source == ClassifierSource.predictions_file and c.status == ClassifierStatus.ready
                else int(predicted.get(c.id) or 0),
                "images_total": n_images,
                "error": c.error,
                "pairs_selected": len(pairs_of[c.id]),
                "pairs_empty": sum(not pair.selected for pair in pairs_of[c.id]),
            }
            for c in classifiers
        ],
        "pairs_selected": pairs_selected,
        "pairs_total": len(active) * (len(active) - 1) // 2,
        "pairs_empty": sum(not pair.selected for pair in pairs),
        "pairs_short": sum(0 < pair.selected < pair.k for pair in pairs),
        "pairs": pairs,
        "jobs_by_status": {status.value: count for status, count in by_status.items()},
        **workers.about(
            db_session=db_session, lost_after_s=lost_after_s, jobs_waiting=by_status.get(JobStatus.queued, 0)
        ),
    }
