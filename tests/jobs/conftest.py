"""A live service on a committed database of its own, tiny timm classifiers with weight files, real images."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from app.classifiers import service as classifiers_service
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db import create_db_engine, create_sessionmaker
from app.images.service import ImageLimits, import_entries
from app.images.sources import folder_entries
from app.images.store import ImageStore
from app.main import create_app
from app.serving import serve_in_thread
from app.settings import Settings
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_SECRET_KEY
from tests.support.images import write_images

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
    return Settings(
        env="test",
        data_dir=tmp_path / "data",
        database_url=fresh_database_url,
        secret_key=TEST_SECRET_KEY,
        job_lease_s=2,
        predict_shard_size=100,
        job_max_attempts=3,
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
            store=ImageStore(service.settings.data_dir),
            competition=competition,
            entries=folder_entries(folder, 10_000_000),
            limits=ImageLimits(10_000_000, 10_000_000, 64),
            executor=executor,
        )
        for seed, architecture in enumerate(architectures):
            weights = write_weights(tmp_path / f"{architecture}.safetensors", architecture, seed)
            classifiers_service.register_timm_weights(
                db_session=session,
                settings=service.settings,
                competition=competition,
                name=architecture,
                architecture=architecture,
                weights_file=weights,
                weights_filename=weights.name,
            )
        session.commit()
        return competition.id
