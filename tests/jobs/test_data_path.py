"""How workers get images: from the blob store directly when they can reach it, else one streamed tar per
batch of a shard from the service, fenced by the job's lease; never one request per image."""

import io
import os
import subprocess
import sys
import tarfile

import httpx
import pytest
from sqlalchemy import select

from app.classifiers.models import Classifier, ClassifierStatus
from app.classifiers.service import read_predictions
from app.images.models import CompetitionImage, Image
from app.images.store import ImageStore
from app.jobs.archives import archive_bytes, shard_archive
from app.jobs.models import Job, JobStatus
from app.jobs.schemas import ClaimResponse
from app.storage import LocalBlobStore
from app.storage.keys import image_key
from tests.conftest import settings_for
from tests.jobs.conftest import serving, set_up_competition
from tests.support.http import HTTP_TIMEOUT_S
from workers.client import LeaseLost, ServiceClient, ServiceError
from workers.image_readers import ShardArchiveReader, StoreReader, archive_members, choose_reader

N_IMAGES = 120


def claim_predict(service) -> ClaimResponse:
    """The first predict job, claimed as the service's worker."""
    client = ServiceClient(service.url, service.worker_token)
    try:
        return client.claim("test")
    finally:
        client.close()


def stored_bytes(service, ordinals) -> list[bytes]:
    """The stored originals at these ordinals."""
    with service.session() as session:
        rows = session.execute(
            select(Image.sha256, Image.format)
            .join(CompetitionImage, CompetitionImage.image_id == Image.id)
            .where(CompetitionImage.ordinal.in_(ordinals))
            .order_by(CompetitionImage.ordinal)
        ).all()
    store = ImageStore(service.settings.blob_store)
    return [store.read(sha256, image_format) for sha256, image_format in rows]


def test_a_shard_archive_is_a_plain_tar_of_its_length_and_damage_is_refused(tmp_path):
    store = LocalBlobStore(tmp_path)
    contents = [os.urandom(size) for size in (0, 1, 511, 512, 513, 70_000)]
    images = []
    for ordinal, data in enumerate(contents, start=5):
        sha256 = f"{ordinal:064x}"
        store.put(image_key(sha256, "jpeg"), data, content_type="image/jpeg", immutable=True)
        images.append((ordinal, sha256, "jpeg", len(data)))
    body = b"".join(shard_archive(store, images))
    assert len(body) == archive_bytes(images)
    reference = io.BytesIO()  # tarfile's own writing, which pads the end to a whole 10 KiB record
    with tarfile.open(fileobj=reference, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for ordinal, data in enumerate(contents, start=5):
            member = tarfile.TarInfo(f"{ordinal}.jpg")
            member.size, member.mode = len(data), 0o644
            archive.addfile(member, io.BytesIO(data))
    assert reference.getvalue().rstrip(b"\0") == body.rstrip(b"\0")  # padding included: no stray bytes
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        assert [(m.name, archive.extractfile(m).read()) for m in archive] == [
            (f"{ordinal}.jpg", data) for ordinal, data in enumerate(contents, start=5)
        ]
    names = [str(ordinal) for ordinal in range(5, 11)]
    assert archive_members(body, names) == contents
    with pytest.raises(ValueError, match="'5.jpg' where 6"):
        archive_members(body, names[1:])
    with pytest.raises(ValueError, match="ends inside '10.jpg'"):
        archive_members(body[:-2000], names)
    with pytest.raises(ValueError, match="does not end after its last member"):
        archive_members(body, names[:-1])
    wrong_size = [(5, images[5][1], "jpeg", 69_999)]  # the database and the store disagree
    with pytest.raises(ValueError, match="not the 69999 bytes expected"):
        b"".join(shard_archive(store, wrong_size))


def test_a_shard_archive_holds_its_images_in_order_for_the_lease_holder_only(live_service, tmp_path):
    set_up_competition(live_service, tmp_path, images=N_IMAGES, architectures=("test_resnet",))
    claim = claim_predict(live_service)
    (job,) = claim.jobs
    task = job.predict
    assert claim.storage_url == live_service.settings.blob_store.url
    url = f"{live_service.url}/api/v1/jobs/{job.id}/images.tar"
    headers = {"Authorization": f"Bearer {live_service.worker_token}"}
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as http:
        whole = http.get(url, headers={**headers, "X-Lease-Token": job.lease_token})
        assert whole.status_code == 200 and whole.headers["content-type"] == "application/x-tar"
        older = http.get(url, params={"lease_token": job.lease_token}, headers=headers)  # older workers
        assert older.status_code == 200 and older.content == whole.content
        missing = http.get(url, headers=headers)
        assert missing.status_code == 422 and "X-Lease-Token" in missing.json()["detail"]
        with tarfile.open(fileobj=io.BytesIO(whole.content)) as archive:
            members = [(m.name, archive.extractfile(m).read()) for m in archive.getmembers()]
        ordinals = list(range(task.shard_start, task.shard_end))
        assert [name.split(".")[0] for name, _ in members] == [str(o) for o in ordinals]
        assert [data for _, data in members] == stored_bytes(live_service, ordinals)

        stale = http.get(url, headers={**headers, "X-Lease-Token": "not-the-lease"})
        assert stale.status_code == 409 and "lease lost" in stale.json()["detail"]
        outside = http.get(url, params={"lease_token": job.lease_token, "end": N_IMAGES}, headers=headers)
        assert outside.status_code == 422
        assert http.get(url, params={"lease_token": job.lease_token}).status_code == 401

    archives = ShardArchiveReader(live_service.url, live_service.worker_token, job.id, job.lease_token)
    assert archives.many(ordinals[10:30]) == stored_bytes(live_service, ordinals[10:30])
    with pytest.raises(LeaseLost):
        ShardArchiveReader(live_service.url, live_service.worker_token, job.id, "stale").many([0, 1])
    chosen = choose_reader(claim.storage_url, task.images, live_service.url, "token", job.id, job.lease_token)
    assert isinstance(chosen, StoreReader)  # this machine can read the service's directory
    assert chosen.many(ordinals[:5]) == stored_bytes(live_service, ordinals[:5])
    elsewhere = choose_reader(
        "file:///nonexistent/mad-data",
        task.images,
        live_service.url,
        "token",
        job.id,
        job.lease_token,
    )
    assert isinstance(elsewhere, ShardArchiveReader)

    lost = task.images[3]  # a blob gone from the store: the archive stops there, and the worker says so
    live_service.settings.blob_store.delete([image_key(lost.sha256, lost.format)])
    with pytest.raises(ServiceError, match="the body ended after 0 of"):
        archives.many(ordinals[:10])


def test_s3_a_remote_worker_that_cannot_reach_the_store_predicts_through_shard_archives(
    tmp_path, fresh_database_url, s3_storage_url
):
    settings = settings_for(tmp_path, fresh_database_url, storage_url=s3_storage_url, predict_shard_size=50)
    with serving(settings) as service:
        competition_id = set_up_competition(
            service, tmp_path, images=N_IMAGES, architectures=("test_resnet",)
        )
        unreachable = {  # the worker's S3 endpoint refuses connections: only the service reaches the bucket
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_MAX_ATTEMPTS": "1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        command = [
            sys.executable,
            "-c",
            "from app.cli.main import app; app()",
            "worker",
            "--url",
            service.url,
        ]
        command += [
            "--token",
            service.worker_token,
            "--exit-when-idle",
            "--device",
            "cpu",
            "--batch-size",
            "16",
        ]
        command += ["--loader-workers", "1"]
        env = {**os.environ, **unreachable, "MAD_DATA_DIR": str(tmp_path / "worker")}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        with service.session() as session:
            statuses = set(session.scalars(select(Job.status)))
            (classifier,) = session.scalars(select(Classifier)).all()
            assert statuses == {JobStatus.done} and classifier.status == ClassifierStatus.ready
            predictions = read_predictions(settings=settings, classifier=classifier, n_images=N_IMAGES)
        assert (predictions.top1 >= 0).all()  # every image was read and decoded
        assert not (tmp_path / "data" / "images").exists() and competition_id
