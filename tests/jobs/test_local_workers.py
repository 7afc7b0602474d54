"""Local `mad worker`s (no --url) each get a token of their own, so several work one database side by side."""

import os
import signal
import sqlite3
import subprocess
import time
from datetime import timedelta

from sqlalchemy import make_url, select

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.db.base import utcnow
from app.jobs.enums import JobStatus
from app.jobs.models import Job
from app.labelling.models import PairSubset
from app.users import service as users_service
from app.users.models import ApiToken, User
from tests.jobs.conftest import local_worker, set_up_competition

WAIT_S = 300


def wait_until_holding_a_job(service, name: str) -> None:
    """Poll the database until worker `name` holds a running job."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with service.session() as session:
            held = session.scalar(
                select(Job.id).where(Job.status == JobStatus.running, Job.lease_owner == name).limit(1)
            )
        if held is not None:
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for worker {name} to claim a job")


def stop_outside_a_transaction(service, worker: subprocess.Popen) -> None:
    """SIGSTOP the worker at a moment it holds no transaction open. On SQLite every transaction holds the one
    write lock from its BEGIN IMMEDIATE, so a worker stopped inside one kept everybody else from the database
    ("database is locked" after the 60 s busy timeout, in a CI run); there, stop it again until the lock is
    free. On Postgres a stopped worker's transaction holds only its own rows, which claims skip."""
    url = make_url(service.settings.sqlalchemy_url)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        worker.send_signal(signal.SIGSTOP)
        if url.get_backend_name() != "sqlite" or write_lock_free(str(url.database)):
            return
        worker.send_signal(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError("the first worker held the SQLite write lock at every try")


def write_lock_free(path: str) -> bool:
    """Whether SQLite's write lock on the database at `path` can be taken within a second (taken, let go)."""
    connection = sqlite3.connect(path, timeout=1.0, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        connection.close()


def test_two_local_workers_on_one_database_both_finish_cleanly(live_service, tmp_path):
    set_up_competition(live_service, tmp_path, images=400, architectures=("test_resnet", "test_efficientnet"))
    workers = [local_worker(live_service.settings, "first")]
    try:
        wait_until_holding_a_job(live_service, "first")
        # Hold it mid-job while the second starts with its own token.
        stop_outside_a_transaction(live_service, workers[0])
        workers.append(local_worker(live_service.settings, "second"))
        wait_until_holding_a_job(live_service, "second")
        workers[0].send_signal(signal.SIGCONT)  # its next heartbeat and upload use its token
        for worker in workers:
            assert worker.wait(timeout=WAIT_S) == 0, worker.stderr.read().decode()
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

    with live_service.session() as session:
        assert set(session.scalars(select(Job.status))) == {JobStatus.done}
        assert set(session.scalars(select(Job.lease_owner))) == {"first", "second"}
        assert set(session.scalars(select(Classifier.status))) == {ClassifierStatus.ready}
        assert len(session.scalars(select(PairSubset)).all()) == 1


def test_local_worker_tokens_are_kept_while_used_and_revoked_after_a_day_unused(db_session):
    first = users_service.local_worker_token(db_session=db_session)
    second = users_service.local_worker_token(db_session=db_session)
    assert first != second
    worker = users_service.user_for_token(db_session=db_session, token=first)
    assert worker is not None and worker == users_service.user_for_token(db_session=db_session, token=second)

    tokens = db_session.scalars(select(ApiToken).join(User).where(User.username == worker.username)).all()
    assert len(tokens) == 2 and all(token.name.endswith(f":{os.getpid()}") for token in tokens)
    for token in tokens:
        token.last_used_at = utcnow() - timedelta(days=1, minutes=1)  # these workers have ended
    db_session.flush()
    third = users_service.local_worker_token(db_session=db_session)
    assert users_service.user_for_token(db_session=db_session, token=first) is None
    assert users_service.user_for_token(db_session=db_session, token=second) is None
    assert users_service.user_for_token(db_session=db_session, token=third) == worker


def test_a_classifier_that_fails_a_shared_shard_fails_alone(live_service, tmp_path):
    """Two classifiers share each shard's claim; one's stored preprocessing cannot be done (input 0×0, as
    an unchecked data_config once allowed): it fails, and the other still gets every prediction."""
    service = live_service
    competition_id = set_up_competition(
        service, tmp_path, images=12, architectures=("test_resnet", "test_efficientnet")
    )
    with service.session() as session:
        good, bad = session.scalars(
            select(Classifier).where(Classifier.competition_id == competition_id).order_by(Classifier.id)
        ).all()
        bad.data_config = {"input_size": [3, 0, 0]}
        session.commit()
    worker = local_worker(service.settings, "isolating")
    try:
        assert worker.wait(timeout=WAIT_S) == 0, worker.stderr.read().decode()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    with service.session() as session:
        statuses = dict(session.execute(select(Classifier.name, Classifier.status)).all())
        assert statuses == {good.name: ClassifierStatus.ready, bad.name: ClassifierStatus.failed}
        predict_jobs = session.execute(
            select(Job.classifier_id, Job.status).where(Job.kind == "predict")
        ).all()
        assert {status for classifier_id, status in predict_jobs if classifier_id == good.id} == {
            JobStatus.done
        }


def test_a_worker_exits_without_a_word_on_stderr(live_settings):
    """Triton (imported by torch) reported its objects still alive at exit as leaks, ~30 lines of "nanobind:
    leaked 514 functions!" read as a crash: the objects frozen at start-up are given back at exit."""
    worker = local_worker(live_settings, "quiet")
    try:
        assert worker.wait(timeout=WAIT_S) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.stderr.read().decode() == ""
