"""A live service on a committed database of its own, tiny timm classifiers with weight files, real images."""

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import safetensors.torch
import timm
import torch
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.classifiers import service as classifiers_service
from app.classifiers.models import Classifier
from app.classifiers.prediction_store import Predictions
from app.classifiers.timm_source import load_weights_file
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.images.models import CompetitionImage, Image
from app.images.service import ImageLimits, import_entries
from app.images.sources import folder_entries
from app.images.store import ImageStore
from app.jobs.lifecycle import enqueue_classifier
from app.main import create_app
from app.serving import serve_in_thread
from app.settings import Settings
from app.storage.keys import image_key, weights_key
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import settings_for
from tests.support.http import HTTP_TIMEOUT_S
from tests.support.images import write_images
from workers.inference import InferenceEngine

ARCHITECTURES = ("test_resnet", "test_efficientnet", "test_vit")
NUM_CLASSES = 1000


def write_weights(path: Path, architecture: str, seed: int) -> Path:
    """Randomly initialised timm weights for the ImageNet-1k label set, saved as safetensors."""
    torch.manual_seed(seed)
    model = timm.create_model(architecture, num_classes=NUM_CLASSES)
    safetensors.torch.save_file(model.state_dict(), str(path))
    return path


@dataclass
class LiveService:
    """A running service, its settings and a way to open sessions on its database."""

    url: str
    settings: Settings
    session: sessionmaker[Session]
    worker_token: str


@pytest.fixture
def live_settings(tmp_path, fresh_database_url) -> Settings:
    """Short leases and small shards, so takeovers and several shards happen quickly."""
    return settings_for(
        tmp_path, fresh_database_url, job_lease_s=2, predict_shard_size=100, job_max_attempts=3
    )


@contextmanager
def serving(settings: Settings, app: FastAPI | None = None) -> Iterator[LiveService]:
    """`app` (by default the app of `settings`) served on a free localhost port, with a worker account."""
    engine = create_db_engine(settings.sqlalchemy_url)
    sessions = create_sessionmaker(engine)
    with sessions() as session:
        worker = users_service.create_user(
            db_session=session, username="worker", role=Role.worker, password=None
        )
        token = users_service.create_api_token(db_session=session, user=worker, name="test")
        session.commit()
    try:
        with serve_in_thread(app or create_app(settings)) as url:
            yield LiveService(url, settings, sessions, token)
    finally:
        engine.dispose()


@pytest.fixture
def live_service(live_settings) -> Iterator[LiveService]:
    """The app served on a free localhost port, with a worker account."""
    with serving(live_settings) as service:
        yield service


@pytest.fixture
def admin_client(live_service) -> Iterator[httpx.Client]:
    """An HTTP client of the live service signed in as an admin."""
    with live_service.session() as session:
        user = users_service.create_user(
            db_session=session, username="admin", role=Role.admin, password="long enough"
        )
        token = users_service.create_api_token(db_session=session, user=user, name="test")
        session.commit()
    with httpx.Client(
        base_url=live_service.url, headers={"Authorization": f"Bearer {token}"}, timeout=HTTP_TIMEOUT_S
    ) as client:
        yield client


def set_up_competition(
    service: LiveService, tmp_path: Path, *, images: int, architectures=ARCHITECTURES, k: int = 5
) -> int:
    """An ImageNet-1k competition with real images and timm classifiers with weight files.

    Untrained networks are unconfident and predict few distinct labels, so T is 0 and the per-label cap
    is lifted: the pipeline, not the models, is under test.
    """
    folder = tmp_path / "corpus"
    write_images(folder, images)
    with service.session() as session, ThreadPoolExecutor(2) as executor:
        competition = create_competition(
            db_session=session,
            spec=CompetitionCreate(name="live", k=k, confidence_threshold=0.0, max_per_label=1000),
        )
        import_entries(
            db_session=session,
            store=ImageStore(service.settings.blob_store),
            competition=competition,
            entries=folder_entries(folder, 10_000_000),
            limits=ImageLimits(10_000_000, 10_000_000, 64),
            executor=executor,
        )
        for seed, architecture in enumerate(architectures):
            add_timm_classifier(
                session, service.settings, competition, tmp_path, architecture, architecture, seed
            )
        session.commit()
        return competition.id


def add_timm_classifier(
    session: Session, settings: Settings, competition, folder: Path, name: str, architecture: str, seed: int
) -> Classifier:
    """Register `architecture` with random weights made from `seed`, as a user's weights file."""
    weights = write_weights(folder / f"{name}.safetensors", architecture, seed)
    classifier = classifiers_service.register_timm_weights(
        db_session=session,
        settings=settings,
        competition=competition,
        name=name,
        architecture=architecture,
        weights_file=weights,
        weights_filename=weights.name,
    )
    enqueue_classifier(db_session=session, settings=settings, classifier=classifier)
    return classifier


def local_worker(settings: Settings, name: str, **env: str) -> subprocess.Popen:
    """`mad worker --exit-when-idle` on the database of `settings`, served privately as on one machine."""
    command = [sys.executable, "-c", "from app.cli.main import app; app()", "worker", "--exit-when-idle"]
    command += ["--name", name, "--device", "cpu", "--batch-size", "16", "--loader-workers", "0"]
    env = {
        **os.environ,
        "MAD_DATABASE_URL": settings.database_url,
        "MAD_DATA_DIR": str(settings.data_dir),
        "MAD_ENV": "development",
        **env,
    }
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def clean_predictions(service, classifier: Classifier, n_images: int) -> Predictions:
    """What an undisturbed run predicts: the engine over every image, in one process."""
    with service.session() as session:
        rows = session.execute(
            select(CompetitionImage.ordinal, Image.sha256, Image.format)
            .join(Image, Image.id == CompetitionImage.image_id)
            .where(CompetitionImage.competition_id == classifier.competition_id)
            .order_by(CompetitionImage.ordinal)
        ).all()
    store = ImageStore(service.settings.blob_store)
    files = {
        ordinal: store.blobs.local_path(image_key(sha256, image_format))
        for ordinal, sha256, image_format in rows
    }
    model = load_weights_file(
        classifier.architecture,
        service.settings.blob_store.local_path(
            weights_key(classifier.weights_sha256, classifier.weights_format)
        ),
        1000,
    )
    engine = InferenceEngine([model], device="cpu", batch_size=32, num_workers=0)
    (predictions,) = engine.predict(list(range(n_images)), lambda ordinal: files[ordinal].read_bytes())
    return predictions
