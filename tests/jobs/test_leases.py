"""Job leases: creating, claiming, heartbeats, takeover of expired leases, fenced idempotent completion."""

from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import select

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.classifiers.models import Classifier
from app.classifiers.prediction_store import Predictions, PredictionStore
from app.db.base import utcnow
from app.errors import Conflict
from app.images.models import CompetitionImage, Image
from app.jobs import service
from app.jobs.enums import JobKind, JobStatus
from app.jobs.models import Job
from tests.conftest import settings_for

SHARD = 4


@pytest.fixture
def settings(tmp_path, database_url):
    return settings_for(tmp_path, database_url, predict_shard_size=SHARD, job_max_attempts=2)


def add_images(db_session, competition, count: int) -> None:
    for ordinal in range(count):
        image = Image(
            sha256=f"{competition.id:02d}{ordinal:062d}",
            format="png",
            width=1,
            height=1,
            bytes=1,
            original_name=f"{ordinal}.png",
        )
        db_session.add(image)
        db_session.flush()
        db_session.add(CompetitionImage(competition_id=competition.id, image_id=image.id, ordinal=ordinal))
    db_session.flush()


def add_classifier(db_session, competition, name: str, settings) -> Classifier:
    classifier = Classifier(
        competition_id=competition.id,
        name=name,
        source=ClassifierSource.timm_weights,
        architecture="test_resnet",
    )
    db_session.add(classifier)
    db_session.flush()
    service.enqueue_predictions(
        db_session=db_session,
        classifier=classifier,
        max_attempts=settings.job_max_attempts,
        shard_size=settings.predict_shard_size,
    )
    return classifier


def shard_predictions(job: Job, label: int) -> Predictions:
    predictions = Predictions.empty(job.shard_end - job.shard_start)
    predictions.top1[:] = label
    predictions.prob[:] = 0.9
    return predictions


def test_predict_jobs_cover_the_corpus_in_shards_and_new_images_get_new_shards(
    db_session, competition, settings
):
    add_images(db_session, competition, 10)
    classifier = add_classifier(db_session, competition, "a", settings)
    jobs = db_session.scalars(select(Job).order_by(Job.shard_start)).all()
    assert [(j.shard_start, j.shard_end) for j in jobs] == [(0, 4), (4, 8), (8, 10)]
    assert classifier.status == ClassifierStatus.predicting
    add_images_from = 10
    for ordinal in range(add_images_from, 13):
        image = Image(sha256=f"ff{ordinal:062d}", format="png", width=1, height=1, bytes=1, original_name="x")
        db_session.add(image)
        db_session.flush()
        db_session.add(CompetitionImage(competition_id=competition.id, image_id=image.id, ordinal=ordinal))
    new = service.enqueue_competition_predictions(
        db_session=db_session, competition_id=competition.id, max_attempts=2, shard_size=SHARD
    )
    assert [(j.shard_start, j.shard_end) for j in new] == [(10, 13)]
    assert (
        service.enqueue_competition_predictions(
            db_session=db_session, competition_id=competition.id, max_attempts=2, shard_size=SHARD
        )
        == []
    )


def test_claim_takes_the_oldest_job_with_its_same_shard_siblings(db_session, competition, settings):
    add_images(db_session, competition, 8)
    a = add_classifier(db_session, competition, "a", settings)
    b = add_classifier(db_session, competition, "b", settings)
    claimed = service.claim(db_session=db_session, worker="w1", lease_seconds=60)
    assert {(j.classifier_id, j.shard_start) for j in claimed} == {(a.id, 0), (b.id, 0)}
    assert all(j.status == JobStatus.running and j.attempts == 1 and j.lease_token for j in claimed)
    assert len({j.lease_token for j in claimed}) == 2
    second = service.claim(db_session=db_session, worker="w2", lease_seconds=60)
    assert {(j.classifier_id, j.shard_start) for j in second} == {(a.id, 4), (b.id, 4)}
    assert service.claim(db_session=db_session, worker="w3", lease_seconds=60) == []


def test_completion_is_fenced_by_the_lease_and_idempotent(db_session, competition, settings):
    add_images(db_session, competition, 4)
    add_classifier(db_session, competition, "a", settings)
    (job,) = service.claim(db_session=db_session, worker="w1", lease_seconds=60)
    first_token = job.lease_token
    job.lease_expires_at = utcnow() - timedelta(seconds=1)  # the first worker went silent
    (taken_over,) = service.claim(db_session=db_session, worker="w2", lease_seconds=60)
    assert taken_over.id == job.id and taken_over.attempts == 2 and taken_over.lease_token != first_token

    with pytest.raises(Conflict, match="lease lost"):
        service.complete_predict(
            db_session=db_session,
            settings=settings,
            job_id=job.id,
            lease_token=first_token,
            predictions=shard_predictions(job, 1),
        )
    assert service.heartbeat(db_session=db_session, leases=[(job.id, first_token, 2)], lease_seconds=60) == {
        job.id: False
    }
    done = service.complete_predict(
        db_session=db_session,
        settings=settings,
        job_id=job.id,
        lease_token=taken_over.lease_token,
        predictions=shard_predictions(job, 2),
    )
    again = service.complete_predict(
        db_session=db_session,
        settings=settings,
        job_id=job.id,
        lease_token=taken_over.lease_token,
        predictions=shard_predictions(job, 3),
    )
    assert done.status == again.status == JobStatus.done
    stored = PredictionStore(settings.blob_store).read(job.classifier_id, 4)
    assert np.array_equal(stored.top1, [2, 2, 2, 2])  # the repeat changed nothing


def test_heartbeats_extend_the_lease_and_record_progress(db_session, competition, settings):
    add_images(db_session, competition, 4)
    add_classifier(db_session, competition, "a", settings)
    (job,) = service.claim(db_session=db_session, worker="w1", lease_seconds=1)
    before = job.lease_expires_at
    assert service.heartbeat(
        db_session=db_session, leases=[(job.id, job.lease_token, 3)], lease_seconds=600
    ) == {job.id: True}
    assert job.lease_expires_at > before + timedelta(seconds=500)
    assert job.progress_done == 3


def test_last_shard_makes_the_classifier_ready_and_queues_pair_selections(db_session, competition, settings):
    add_images(db_session, competition, 4)
    classifiers = [add_classifier(db_session, competition, name, settings) for name in ("a", "b", "c")]
    claimed = service.claim(db_session=db_session, worker="w", lease_seconds=60)
    for label, job in enumerate(claimed):
        service.complete_predict(
            db_session=db_session,
            settings=settings,
            job_id=job.id,
            lease_token=job.lease_token,
            predictions=shard_predictions(job, label),
        )
    assert all(c.status == ClassifierStatus.ready for c in classifiers)
    select_jobs = db_session.scalars(select(Job).where(Job.kind == JobKind.select)).all()
    ids = [c.id for c in classifiers]
    assert sorted((j.classifier_id, j.other_classifier_id) for j in select_jobs) == [
        (ids[0], ids[1]),
        (ids[0], ids[2]),
        (ids[1], ids[2]),
    ]


def test_permanent_failure_fails_the_classifier_and_cancels_its_queue(db_session, competition, settings):
    add_images(db_session, competition, 8)
    classifier = add_classifier(db_session, competition, "a", settings)
    (job,) = service.claim(db_session=db_session, worker="w", lease_seconds=60)
    service.fail(
        db_session=db_session,
        job_id=job.id,
        lease_token=job.lease_token,
        error="classifier head has 7 outputs, the competition has 1000 classes",
        permanent=True,
    )
    assert classifier.status == ClassifierStatus.failed
    assert "7 outputs" in classifier.error
    statuses = db_session.scalars(select(Job.status).where(Job.classifier_id == classifier.id)).all()
    assert statuses == [JobStatus.failed, JobStatus.cancelled]


def test_transient_failures_are_retried_up_to_the_cap_keeping_the_error(db_session, competition, settings):
    add_images(db_session, competition, 4)
    classifier = add_classifier(db_session, competition, "a", settings)
    (job,) = service.claim(db_session=db_session, worker="w", lease_seconds=60)
    service.fail(
        db_session=db_session, job_id=job.id, lease_token=job.lease_token, error="CUDA OOM", permanent=False
    )
    assert job.status == JobStatus.queued and job.error == "CUDA OOM"
    (retry,) = service.claim(db_session=db_session, worker="w", lease_seconds=60)
    retry.lease_expires_at = utcnow() - timedelta(seconds=1)  # and this worker dies too
    assert service.claim(db_session=db_session, worker="w", lease_seconds=60) == []
    assert job.status == JobStatus.failed and "worker lost" in job.error
    assert classifier.status == ClassifierStatus.failed
