"""Completing or failing a job while its classifier is retired cannot deadlock on Postgres.

Retiring locks the competition, then the classifier's jobs. Here the test holds the competition lock
(as retiring does first) until the worker's request waits for it, then retires the classifier in that
transaction. A request that had locked its job row before the competition row would now deadlock with
it; taking the competition first, the request waits holding nothing and then finds its job cancelled.
SQLite has a single writer, so the interleaving cannot happen there.
"""

import threading
import time

import psycopg
import pytest
from sqlalchemy import make_url, select

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.classifiers.prediction_store import PredictionStore
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition, lock_competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.errors import Conflict
from app.jobs import service
from app.jobs.enums import JobStatus
from app.jobs.lifecycle import retire_classifier
from app.jobs.models import Job
from app.settings import Settings
from tests.conftest import settings_for
from tests.jobs.test_leases import add_classifier, add_images, shard_predictions

WAIT_S = 60


def sessions_on(database_url: str):
    """A sessionmaker on its own engine."""
    return create_sessionmaker(create_db_engine(database_url))


def lock_waiters(database_url: str) -> int:
    """How many sessions of this database wait for a lock."""
    url = make_url(database_url)
    with psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, dbname=url.database
    ) as admin:
        return admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
            (url.database,),
        ).fetchone()[0]


def finish_job(settings: Settings, job: Job, how: str) -> None:
    """What a worker's request does: upload the shard's predictions, or report a permanent failure."""
    with sessions_on(settings.database_url)() as session:
        if how == "complete":
            service.complete_predict(
                db_session=session,
                settings=settings,
                job_id=job.id,
                lease_token=job.lease_token,
                predictions=shard_predictions(job, 1),
            )
        else:
            service.fail(
                db_session=session, job_id=job.id, lease_token=job.lease_token, error="boom", permanent=True
            )
        session.commit()


@pytest.mark.parametrize("how", ["complete", "fail"])
def test_retiring_a_classifier_while_its_job_finishes_does_not_deadlock(
    fresh_database_url, backend, tmp_path, how
):
    if backend == "sqlite":
        pytest.skip("SQLite serialises writers: no row locks to order")
    settings = settings_for(tmp_path, fresh_database_url, predict_shard_size=4)
    sessions = sessions_on(fresh_database_url)
    with sessions() as session:
        competition = create_competition(db_session=session, spec=CompetitionCreate(name="locks"))
        add_images(session, competition, 4)
        classifier_id = add_classifier(session, competition, "a", settings).id
        (job,) = service.claim(db_session=session, worker="w", lease_seconds=600)
        session.commit()

    outcome: list[BaseException | None] = []

    def worker_request() -> None:
        try:
            finish_job(settings, job, how)
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    with sessions() as retiring:
        lock_competition(db_session=retiring, competition_id=competition.id)
        request = threading.Thread(target=worker_request)
        request.start()
        deadline = time.monotonic() + WAIT_S
        while lock_waiters(fresh_database_url) == 0:
            assert request.is_alive() and time.monotonic() < deadline, "the request never waited"
            time.sleep(0.02)
        retire_classifier(db_session=retiring, classifier=retiring.get(Classifier, classifier_id))
        retiring.commit()
    request.join(WAIT_S)

    assert len(outcome) == 1 and isinstance(outcome[0], Conflict), outcome
    with sessions() as session:
        assert session.get(Classifier, classifier_id).status == ClassifierStatus.retired
        stored = session.get(Job, job.id)
        assert stored.status == JobStatus.cancelled and "retired" in stored.error
        assert session.scalars(select(Job.status)).all() == [JobStatus.cancelled]
    assert not PredictionStore(settings.blob_store).shard_ranges(classifier_id)
