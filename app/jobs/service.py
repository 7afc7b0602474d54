"""Leased jobs: create predict and select jobs, claim them, heartbeat, and complete or fail them fenced.

A job is claimed by setting a fresh lease token and an expiry; the holder extends the lease by heartbeats.
A job whose lease expired is claimable again (and the old holder's token no longer matches), so a killed
worker's job is taken over. Completion and failure must present the current lease token (fencing) and
repeating a completion with the same token is a no-op. On Postgres claims use FOR UPDATE SKIP LOCKED;
SQLite serialises writers (BEGIN IMMEDIATE), which gives the same exclusivity.

Row locks are taken in one order, competition, then jobs, then classifiers, so that completing or failing
a job and retiring its classifier at once cannot deadlock on Postgres.
"""

import uuid
from datetime import timedelta
from itertools import combinations

import numpy as np
from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.classifiers.models import Classifier
from app.classifiers.prediction_store import NO_LABEL, Predictions, PredictionStore
from app.competitions.models import Competition, Sampling
from app.competitions.service import lock_competition
from app.core.selection import PairDiagnosis, PairSelection
from app.db.base import utcnow
from app.errors import Conflict, InvalidInput, NotFound, storage_errors
from app.images.models import CompetitionImage, Image
from app.images.service import competition_image_count
from app.jobs import workers
from app.jobs.archives import ArchiveImage
from app.jobs.enums import JobKind, JobStatus
from app.jobs.models import Job
from app.labelling.active_sampling import policy
from app.labelling.subsets import store_pair_subset
from app.settings import Settings

MAX_SHARED_PREDICT_JOBS = 8


def predict_key(classifier_id: int, start: int, end: int) -> str:
    """The unique key of the job predicting ordinals [start, end) with one classifier."""
    return f"predict:{classifier_id}:{start}-{end}"


def select_key(classifier_a_id: int, classifier_b_id: int) -> str:
    """The unique key of the job selecting the subset of pair (a, b), a < b."""
    return f"select:{classifier_a_id}:{classifier_b_id}"


def lock_competition_of_job(*, db_session: Session, job_id: int) -> None:
    """Lock the competition of job `job_id` (if there is such a job) before the job itself is locked."""
    competition_id = db_session.scalar(select(Job.competition_id).where(Job.id == job_id))
    if competition_id is not None:
        lock_competition(db_session=db_session, competition_id=competition_id)


def enqueue_predictions(
    *, db_session: Session, classifier: Classifier, max_attempts: int, shard_size: int
) -> list[Job]:
    """Predict jobs for the competition's ordinals that no job of this timm classifier covers yet."""
    if classifier.source == ClassifierSource.predictions_file or classifier.status in (
        ClassifierStatus.failed,
        ClassifierStatus.retired,
    ):
        return []
    n_images = competition_image_count(db_session=db_session, competition_id=classifier.competition_id)
    covered = db_session.scalar(
        select(func.max(Job.shard_end)).where(Job.kind == JobKind.predict, Job.classifier_id == classifier.id)
    )
    jobs = [
        Job(
            competition_id=classifier.competition_id,
            kind=JobKind.predict,
            key=predict_key(classifier.id, start, min(start + shard_size, n_images)),
            classifier_id=classifier.id,
            shard_start=start,
            shard_end=min(start + shard_size, n_images),
            max_attempts=max_attempts,
            progress_total=min(start + shard_size, n_images) - start,
        )
        for start in range(covered or 0, n_images, shard_size)
    ]
    if jobs:
        db_session.add_all(jobs)
        classifier.status = ClassifierStatus.predicting
        db_session.flush()
    return jobs


def enqueue_competition_predictions(
    *, db_session: Session, competition_id: int, max_attempts: int, shard_size: int
) -> list[Job]:
    """Predict jobs for newly imported images, for every active timm classifier of the competition."""
    lock_competition(db_session=db_session, competition_id=competition_id)
    classifiers = db_session.scalars(select(Classifier).where(Classifier.competition_id == competition_id))
    return [
        job
        for classifier in classifiers
        for job in enqueue_predictions(
            db_session=db_session, classifier=classifier, max_attempts=max_attempts, shard_size=shard_size
        )
    ]


def enqueue_selections(*, db_session: Session, competition_id: int, max_attempts: int) -> list[Job]:
    """A select job for every pair of ready classifiers that has none (Algorithm 1; Algorithm 2 adds m)."""
    ready_ids = db_session.scalars(
        select(Classifier.id)
        .where(Classifier.competition_id == competition_id, Classifier.status == ClassifierStatus.ready)
        .order_by(Classifier.id)
    ).all()
    existing = set(db_session.scalars(select(Job.key).where(Job.competition_id == competition_id)))
    jobs = [
        Job(
            competition_id=competition_id,
            kind=JobKind.select,
            key=select_key(a, b),
            classifier_id=a,
            other_classifier_id=b,
            max_attempts=max_attempts,
            progress_total=1,
        )
        for a, b in combinations(ready_ids, 2)
        if select_key(a, b) not in existing
    ]
    db_session.add_all(jobs)
    db_session.flush()
    return jobs


def _claimable(now):
    """Queued jobs, and running jobs whose lease has expired."""
    return or_(
        Job.status == JobStatus.queued, and_(Job.status == JobStatus.running, Job.lease_expires_at < now)
    )


def claim(*, db_session: Session, worker: str, lease_seconds: int) -> list[Job]:
    """Lease the oldest claimable job; a predict job comes with same-shard ones (one decoded batch). The
    worker is seen, after the jobs are locked (as heartbeats lock jobs, then sightings)."""
    jobs = _lease_claimable(db_session=db_session, worker=worker, lease_seconds=lease_seconds)
    workers.seen(db_session=db_session, workers=[worker], now=utcnow())
    return jobs


def _lease_claimable(*, db_session: Session, worker: str, lease_seconds: int) -> list[Job]:
    """Lease the oldest claimable job with its same-shard ones; [] when none."""
    now = utcnow()
    while True:
        first = db_session.scalar(
            select(Job).where(_claimable(now)).order_by(Job.id).limit(1).with_for_update(skip_locked=True)
        )
        if first is None:
            return []
        if _give_up_if_exhausted(db_session=db_session, job=first, now=now):
            continue
        jobs = [first]
        if first.kind == JobKind.predict:
            jobs += _same_shard_jobs(db_session=db_session, job=first, now=now)
        for job in jobs:
            _lease(job, worker=worker, now=now, lease_seconds=lease_seconds)
        db_session.flush()
        return jobs


def _same_shard_jobs(*, db_session: Session, job: Job, now) -> list[Job]:
    """Other claimable predict jobs for the same ordinals, so their classifiers share decoding."""
    candidates = db_session.scalars(
        select(Job)
        .where(
            _claimable(now),
            Job.kind == JobKind.predict,
            Job.competition_id == job.competition_id,
            Job.shard_start == job.shard_start,
            Job.shard_end == job.shard_end,
            Job.id != job.id,
        )
        .order_by(Job.id)
        .limit(MAX_SHARED_PREDICT_JOBS - 1)
        .with_for_update(skip_locked=True)
    ).all()
    return [c for c in candidates if not _give_up_if_exhausted(db_session=db_session, job=c, now=now)]


def _give_up_if_exhausted(*, db_session: Session, job: Job, now) -> bool:
    """Fail a job whose lease expired once too often (its workers keep dying); True if it was failed."""
    if job.status != JobStatus.running or job.attempts < job.max_attempts:
        return False
    _fail_permanently(
        db_session=db_session,
        job=job,
        error=f"lease expired {job.attempts} times without a heartbeat (worker lost; last {job.lease_owner})",
        now=now,
    )
    return True


def _lease(job: Job, *, worker: str, now, lease_seconds: int) -> None:
    """Give the job a fresh lease token held by `worker`."""
    job.status = JobStatus.running
    job.attempts += 1
    job.lease_owner = worker
    job.lease_token = uuid.uuid4().hex
    job.lease_expires_at = now + timedelta(seconds=lease_seconds)
    job.heartbeat_at = now
    job.started_at = job.started_at or now
    job.progress_done = 0


def unfinished_count(*, db_session: Session) -> int:
    """Jobs queued or running anywhere: work that is or may again become claimable."""
    return db_session.execute(
        select(func.count()).where(Job.status.in_([JobStatus.queued, JobStatus.running]))
    ).scalar_one()


def heartbeat(
    *, db_session: Session, leases: list[tuple[int, str, int]], lease_seconds: int
) -> dict[int, bool]:
    """Extend each (job id, lease token, progress) lease still held, its holder seen; False for a lease that
    was lost."""
    now = utcnow()
    held, owners = {}, set()
    for job_id, lease_token, progress_done in leases:
        job = db_session.scalar(select(Job).where(Job.id == job_id).with_for_update())
        if job is not None and job.status == JobStatus.running and job.lease_token == lease_token:
            owners.add(job.lease_owner)
            job.lease_expires_at = now + timedelta(seconds=lease_seconds)
            job.heartbeat_at = now
            job.progress_done = min(max(progress_done, 0), job.progress_total)
            held[job_id] = True
        else:
            held[job_id] = False
    workers.seen(db_session=db_session, workers=[owner for owner in owners if owner is not None], now=now)
    db_session.flush()
    return held


def held_job(*, db_session: Session, job_id: int, lease_token: str, kind: JobKind) -> Job | None:
    """The running job of this kind under this lease, locked; None if it is already done under this lease.

    Raises Conflict when another worker holds it now (lease lost) and NotFound for an unknown job.
    """
    job = _job(db_session, job_id, kind, lock=True)
    if job.lease_token != lease_token:
        raise _lease_lost(job_id)
    if job.status == JobStatus.done:
        return None
    if job.status != JobStatus.running:
        raise Conflict(f"job {job_id} is {job.status.value}, not running")
    return job


def mark_done(*, db_session: Session, job: Job) -> None:
    """Record a job as finished by its lease holder."""
    job.status = JobStatus.done
    job.finished_at = utcnow()
    job.lease_expires_at = None
    job.progress_done = job.progress_total
    job.error = None
    db_session.flush()


def fail(*, db_session: Session, job_id: int, lease_token: str, error: str, permanent: bool) -> Job:
    """Requeue a failed job, or fail it (and its classifier) when permanent or out of attempts."""
    lock_competition_of_job(db_session=db_session, job_id=job_id)
    job = _job(db_session, job_id, lock=True)
    if job.lease_token != lease_token or job.status != JobStatus.running:
        raise _lease_lost(job_id)
    if permanent or job.attempts >= job.max_attempts:
        _fail_permanently(db_session=db_session, job=job, error=error, now=utcnow())
    else:
        job.status = JobStatus.queued
        job.error = error
        job.lease_token = None
        job.lease_expires_at = None
    db_session.flush()
    return job


def _fail_permanently(*, db_session: Session, job: Job, error: str, now) -> None:
    """Fail the job; a failed predict job fails its classifier, whose other queued jobs are cancelled."""
    job.status = JobStatus.failed
    job.error = error
    job.finished_at = now
    job.lease_expires_at = None
    if job.kind != JobKind.predict:
        return
    classifier = db_session.get_one(Classifier, job.classifier_id)
    classifier.status = ClassifierStatus.failed
    classifier.error = error
    for sibling in db_session.scalars(
        select(Job).where(
            Job.classifier_id == classifier.id, Job.kind == JobKind.predict, Job.status == JobStatus.queued
        )
    ):
        sibling.status = JobStatus.cancelled
        sibling.error = f"classifier {classifier.name!r} failed: {error}"
        sibling.finished_at = now


def list_jobs(
    *, db_session: Session, competition_id: int | None, status: JobStatus | None, limit: int
) -> list[Job]:
    """At most `limit` jobs, newest first, optionally of one competition and one status."""
    query = select(Job).order_by(Job.id.desc()).limit(limit)
    if competition_id is not None:
        query = query.where(Job.competition_id == competition_id)
    if status is not None:
        query = query.where(Job.status == status)
    return list(db_session.scalars(query))


def complete_predict(
    *, db_session: Session, settings: Settings, job_id: int, lease_token: str, predictions: Predictions
) -> Job:
    """Store a shard's predictions and finish the job; the classifier's last shard makes it ready."""
    lock_competition_of_job(db_session=db_session, job_id=job_id)  # enqueue_selections below needs it too
    job = held_job(db_session=db_session, job_id=job_id, lease_token=lease_token, kind=JobKind.predict)
    if job is None:
        return db_session.get_one(Job, job_id)
    shard_start, shard_end = job.shard
    expected = shard_end - shard_start
    if len(predictions) != expected:
        raise InvalidInput(f"job {job_id} covers {expected} images, the upload has {len(predictions)} rows")
    competition = db_session.get_one(Competition, job.competition_id)
    _check_shard_values(job_id, predictions, len(competition.class_keys))
    with storage_errors(f"the predictions of job {job_id}"):  # no partial file; the job stays running
        PredictionStore(settings.blob_store).write_shard(job.classifier_id, shard_start, predictions)
    mark_done(db_session=db_session, job=job)
    unfinished = db_session.scalar(
        select(func.count()).where(
            Job.classifier_id == job.classifier_id, Job.kind == JobKind.predict, Job.status != JobStatus.done
        )
    )
    classifier = db_session.get_one(Classifier, job.classifier_id)
    if unfinished == 0 and classifier.status == ClassifierStatus.predicting:
        classifier.status = ClassifierStatus.ready
        enqueue_selections(
            db_session=db_session, competition_id=job.competition_id, max_attempts=settings.job_max_attempts
        )
    return job


def _check_shard_values(job_id: int, predictions: Predictions, num_classes: int) -> None:
    """Labels in [-1, num_classes) (-1: no prediction), probabilities finite in [0, 1], entropies NaN
    (unknown) or finite and non-negative; else InvalidInput naming the array."""
    for name in ("top1", "top5"):
        labels = getattr(predictions, name)
        if ((labels < NO_LABEL) | (labels >= num_classes)).any():
            raise InvalidInput(f"job {job_id}: {name} has labels outside [-1, {num_classes})")
    for name in ("prob", "top5_prob"):
        values = getattr(predictions, name)
        if not (np.isfinite(values) & (values >= 0) & (values <= 1)).all():
            raise InvalidInput(f"job {job_id}: {name} must be finite probabilities in [0, 1]")
    entropy = predictions.entropy_bits
    if (~np.isnan(entropy) & ~(np.isfinite(entropy) & (entropy >= 0))).any():
        raise InvalidInput(f"job {job_id}: entropy_bits must be non-negative bits (NaN when unknown)")


def complete_select(
    *, db_session: Session, job_id: int, lease_token: str, selection: PairSelection, diagnosis: PairDiagnosis
) -> Job:
    """Store the pair's selected images and reserve (S_ij, Algorithm 1 line 10) with the diagnosis of its
    threshold, and finish the job."""
    job = held_job(db_session=db_session, job_id=job_id, lease_token=lease_token, kind=JobKind.select)
    if job is None:
        return db_session.get_one(Job, job_id)
    competition = db_session.get_one(Competition, job.competition_id)
    image_id_by_ordinal = dict(
        db_session.execute(
            select(CompetitionImage.ordinal, CompetitionImage.image_id).where(
                CompetitionImage.competition_id == competition.id,
                CompetitionImage.ordinal.in_([int(o) for o in selection.ordinals]),
            )
        ).all()
    )
    unknown = [int(o) for o in selection.ordinals if int(o) not in image_id_by_ordinal]
    if unknown:
        raise InvalidInput(f"job {job_id}: ordinals {unknown[:5]} are not images of the competition")
    num_classes = len(competition.class_keys)
    beyond = sorted(
        {int(label) for label in (*selection.labels_i, *selection.labels_j) if label >= num_classes}
    )
    if beyond:
        raise InvalidInput(f"job {job_id}: labels {beyond[:5]} are beyond the {num_classes} classes")
    entries = [
        (image_id_by_ordinal[int(ordinal)], distance, label_a, label_b, prob_a, prob_b)
        for ordinal, distance, label_a, label_b, prob_a, prob_b in zip(
            selection.ordinals,
            selection.distances,
            selection.labels_i,
            selection.labels_j,
            selection.probs_i,
            selection.probs_j,
            strict=True,
        )
    ]
    store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=job.classifier_id,
        classifier_b_id=job.classifier_b_id,
        entries=entries,
        diagnosis=diagnosis.as_dict(),
        below_threshold=(~selection.passed).tolist(),
    )
    mark_done(db_session=db_session, job=job)
    return job


def rerun_policy_once_selected(*, db_session: Session, competition_id: int) -> None:
    """Under active sampling, rerun the policy once no select job of the competition is queued or running
    (the last of a reselection or of a new classifier's pairs): its `settled` flag and the items' priorities
    then account for the new pairs' images. Called in a transaction of its own after the job's is committed,
    so that it takes the competition's row before any item, as every policy run does."""
    competition = db_session.get_one(Competition, competition_id)
    pending = db_session.scalar(
        select(func.count()).where(
            Job.competition_id == competition_id,
            Job.kind == JobKind.select,
            Job.status.in_((JobStatus.queued, JobStatus.running)),
        )
    )
    if competition.sampling == Sampling.active and not pending:
        policy.refresh(db_session, competition)


def shard_images(*, db_session: Session, competition_id: int, start: int, end: int) -> list[ArchiveImage]:
    """The competition's images with ordinals in [start, end), in order."""
    rows = db_session.execute(
        select(CompetitionImage.ordinal, Image.sha256, Image.format, Image.bytes)
        .join(Image, Image.id == CompetitionImage.image_id)
        .where(
            CompetitionImage.competition_id == competition_id,
            CompetitionImage.ordinal >= start,
            CompetitionImage.ordinal < end,
        )
        .order_by(CompetitionImage.ordinal)
    )
    return [ArchiveImage(row.ordinal, row.sha256, row.format, row.bytes) for row in rows]


def leased_predict_job(*, db_session: Session, job_id: int, lease_token: str) -> Job:
    """The running predict job under this lease (not locked: reading its images changes nothing).

    Raises Conflict when the lease is not (or no longer) this one, NotFound for an unknown job."""
    job = _job(db_session, job_id, JobKind.predict, lock=False)
    if job.lease_token != lease_token or job.status != JobStatus.running:
        raise _lease_lost(job_id)
    return job


def _job(db_session: Session, job_id: int, kind: JobKind | None = None, *, lock: bool) -> Job:
    """The job (locked FOR UPDATE if asked); NotFound for an unknown id, InvalidInput if not of this kind."""
    job = db_session.get(Job, job_id, with_for_update=lock)
    if job is None:
        raise NotFound(f"no job with id {job_id}")
    if kind is not None and job.kind != kind:
        raise InvalidInput(f"job {job_id} is a {job.kind.value} job, not a {kind.value} job")
    return job


def _lease_lost(job_id: int) -> Conflict:
    """The error of a worker whose lease on the job has gone to another worker or ended."""
    return Conflict(f"job {job_id}: lease lost, another worker holds or finished it")


def excluded_ordinals(*, db_session: Session, competition_id: int) -> list[int]:
    """Ordinals an admin excluded (never candidates for selection)."""
    return list(
        db_session.scalars(
            select(CompetitionImage.ordinal).where(
                CompetitionImage.competition_id == competition_id, CompetitionImage.excluded
            )
        )
    )
