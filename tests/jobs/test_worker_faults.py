"""Faults: a worker killed with SIGKILL mid-shard is taken over; racing workers never both complete a job."""

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from sqlalchemy import select

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.classifiers.prediction_store import Predictions, PredictionStore
from app.images.models import CompetitionImage, Image
from app.jobs.enums import JobStatus
from app.jobs.models import Job
from app.jobs.schemas import ClaimedJob
from app.storage.keys import image_key
from tests.jobs.conftest import clean_predictions, serving, set_up_competition
from workers.client import LeaseLost, ServiceClient

WAIT_S = 120


def start_worker(service, name: str, *extra: str) -> subprocess.Popen:
    """`mad worker` in its own process against the live service."""
    command = [
        sys.executable,
        "-c",
        "from app.cli.main import app; app()",
        "worker",
        "--url",
        service.url,
        "--token",
        service.worker_token,
        "--name",
        name,
        "--device",
        "cpu",
        "--batch-size",
        "16",
        "--loader-workers",
        "0",
        *extra,
    ]
    env = {**os.environ, "MAD_DATA_DIR": str(service.settings.data_dir / name)}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for(predicate, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class HeldImage:
    """One stored image replaced by a named pipe: a worker reading it (workers on the service's machine read
    the store directly) is stuck there until the file is put back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.original = path.read_bytes()
        path.unlink()
        os.mkfifo(path)
        self.writer: int | None = None

    def reached(self) -> bool:
        """Whether a reader has opened the pipe (a writer can open it without blocking only then)."""
        try:
            self.writer = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: nobody reads it yet
            return False
        return True

    def put_back(self) -> None:
        """The image's file again in place of the pipe."""
        spare = self.path.with_name(".spare")
        spare.write_bytes(self.original)
        os.replace(spare, self.path)
        if self.writer is not None:
            os.close(self.writer)


def test_a_worker_killed_mid_shard_is_taken_over_and_predictions_equal_a_clean_run(live_settings, tmp_path):
    n_images, held_ordinal = 600, 150  # the second shard's image 50: one shard done, three batches into this
    with serving(live_settings) as service:
        set_up_competition(service, tmp_path, images=n_images, architectures=("test_resnet",))
        with service.session() as session:
            sha256, image_format = session.execute(
                select(Image.sha256, Image.format)
                .join(CompetitionImage, CompetitionImage.image_id == Image.id)
                .where(CompetitionImage.ordinal == held_ordinal)
            ).one()
        held = HeldImage(service.settings.blob_store.local_path(image_key(sha256, image_format)))
        victim = start_worker(service, "victim")

        def victim_reported_progress_on_the_held_shard():
            with service.session() as session:
                return session.scalar(
                    select(Job).where(
                        Job.status == JobStatus.running,
                        Job.lease_owner == "victim",
                        Job.shard_start <= held_ordinal,
                        Job.shard_end > held_ordinal,
                        Job.progress_done > 0,
                    )
                )

        wait_for(held.reached, "the victim to read the held image")
        interrupted = wait_for(victim_reported_progress_on_the_held_shard, "a heartbeat with its progress")
        victim.send_signal(signal.SIGKILL)  # stuck on the held image, so it cannot finish the shard first
        victim.wait()
        held.put_back()

        rescuer = start_worker(service, "rescuer", "--exit-when-idle")
        assert rescuer.wait(timeout=WAIT_S) == 0, rescuer.stderr.read().decode()

        with service.session() as session:
            job = session.get(Job, interrupted.id)
            assert (job.status, job.lease_owner) == (JobStatus.done, "rescuer")
            assert job.attempts > interrupted.attempts  # leased again after the victim died, then finished
            classifier = session.scalars(select(Classifier)).one()
            assert classifier.status == ClassifierStatus.ready
            assert session.scalars(select(Job.status)).all() == [JobStatus.done] * (n_images // 100)
        stored = PredictionStore(service.settings.blob_store).read(classifier.id, n_images)  # no gap/overlap
        clean = clean_predictions(service, classifier, n_images)
    assert np.array_equal(stored.top1, clean.top1)
    assert np.allclose(stored.prob, clean.prob, atol=1e-5)
    assert np.allclose(stored.top5_prob, clean.top5_prob, atol=1e-5)


def shard_result(job: ClaimedJob) -> Predictions:
    assert job.predict is not None
    size = job.predict.shard_end - job.predict.shard_start
    predictions = Predictions.empty(size)
    predictions.top1[:] = 7
    predictions.prob[:] = 0.9
    return predictions


def test_racing_workers_never_both_complete_a_job(live_service, tmp_path):
    set_up_competition(live_service, tmp_path, images=100, architectures=("test_resnet",))
    slow, fast = (
        ServiceClient(live_service.url, live_service.worker_token),
        ServiceClient(live_service.url, live_service.worker_token),
    )
    (first,) = slow.claim("slow").jobs
    time.sleep(live_service.settings.job_lease_s + 0.5)  # no heartbeat: the lease expires
    (second,) = fast.claim("fast").jobs
    assert second.id == first.id and second.lease_token != first.lease_token

    fast.complete_predict(second.id, second.lease_token, shard_result(second))
    for attempt in (
        lambda: slow.complete_predict(first.id, first.lease_token, shard_result(first)),
        lambda: slow.fail(first.id, first.lease_token, "late", permanent=True),
    ):
        try:
            attempt()
            raise AssertionError("the worker that lost its lease could still finish the job")
        except LeaseLost:
            pass
    assert slow.heartbeat([(first.id, first.lease_token, 50)]) == {first.id: False}
    fast.complete_predict(second.id, second.lease_token, shard_result(second))  # idempotent repeat
    with live_service.session() as session:
        job = session.get(Job, first.id)
        assert (job.status, job.lease_owner, job.attempts) == (JobStatus.done, "fast", 2)


def test_concurrent_claims_hand_each_job_to_exactly_one_worker(live_service, tmp_path):
    set_up_competition(live_service, tmp_path, images=1000, architectures=("test_resnet",))  # 10 shards

    def claim_all(name: str) -> list[int]:
        client = ServiceClient(live_service.url, live_service.worker_token)
        claimed = []
        while jobs := client.claim(name).jobs:
            claimed += [job.id for job in jobs]
        return claimed

    with ThreadPoolExecutor(8) as pool:
        per_worker = list(pool.map(claim_all, [f"w{i}" for i in range(8)]))
    claimed = [job_id for ids in per_worker for job_id in ids]
    assert len(claimed) == len(set(claimed)) == 10
