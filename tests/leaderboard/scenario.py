"""A small MAD competition built through the real services: images, classifiers registered from prediction
files, pair selections through the job queue (as the worker runs them), and votes through labelling."""

import io
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.classifiers import service as classifiers_service
from app.classifiers.models import Classifier
from app.competitions.models import Competition, Sampling
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.images.models import Image
from app.images.service import competition_image_count
from app.images.store import ImageStore
from app.jobs import service as jobs_service
from app.jobs.enums import JobKind
from app.jobs.lifecycle import enqueue_classifier
from app.labelling.annotating.answers import submit_answers
from app.labelling.annotating.queue import next_item
from app.labelling.types import Answer
from app.settings import Settings
from app.users import service as users_service
from app.users.models import Role, User
from tests.conftest import TEST_PASSWORD
from tests.labelling.factories import add_images
from tests.support.jobs import competition_diagnosis, competition_selection

DIGITS = """\
root: digit
classes: ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
names: {"0": "zero", "1": "one", "2": "two", "3": "three", "4": "four",
        "5": "five", "6": "six", "7": "seven", "8": "eight", "9": "nine"}
children:
  digit: [round, straight]
  round: ["0", "6", "8", "9", "3"]
  straight: ["1", "4", "7", "2", "5"]
"""
N_CLASSES = 10

Contains = Callable[[int, int], bool]
"""contains(ordinal, class_index): does the image at this ordinal show this class (the annotators' truth)."""


def digits_competition(
    db_session: Session, name: str = "digits", k: int = 6, sampling: Sampling = Sampling.uniform
) -> Competition:
    """A competition over the ten digits (custom taxonomy: round and straight digits) with no confidence
    threshold and no per-label cap, so small hand-made predictions select predictably."""
    return create_competition(
        db_session=db_session,
        spec=CompetitionCreate(
            name=name,
            taxonomy="custom",
            taxonomy_source=DIGITS,
            k=k,
            confidence_threshold=0.0,
            max_per_label=1000,
            sampling=sampling,
        ),
    )


def corpus(db_session: Session, settings: Settings, competition: Competition, n: int) -> list[str]:
    """n images in the competition with files and thumbnails in the store; their hashes by ordinal."""
    image_ids = add_images(db_session, competition, n, ImageStore(settings.blob_store))
    sha256_of = dict(db_session.execute(select(Image.id, Image.sha256).where(Image.id.in_(image_ids))).all())
    return [sha256_of[image_id] for image_id in image_ids]


def predictions_parquet(
    hashes: Sequence[str], top1: np.ndarray, seed: int, confidence: tuple[float, float] = (0.5, 1.0)
) -> bytes:
    """A predictions file (Parquet keyed by sha256) with top-1 probabilities drawn uniformly from
    `confidence` (confident by default) and random entropies."""
    rng = np.random.default_rng(seed)
    table = pa.table(
        {
            "sha256": list(hashes),
            "top1": np.asarray(top1, dtype=np.int64),
            "prob": rng.uniform(*confidence, len(hashes)),
            "entropy": rng.uniform(0.0, 3.0, len(hashes)),
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def register(
    db_session: Session,
    settings: Settings,
    competition: Competition,
    tmp_path: Path,
    name: str,
    hashes: Sequence[str],
    top1: np.ndarray,
    reported_accuracy: float | None = None,
    seed: int = 0,
    confidence: tuple[float, float] = (0.5, 1.0),
) -> Classifier:
    """Register a classifier from a predictions file (ready at once; its pair selections are queued)."""
    path = tmp_path / f"{name}.parquet"
    path.write_bytes(predictions_parquet(hashes, top1, seed, confidence))
    classifier = classifiers_service.register_predictions_file(
        db_session=db_session,
        settings=settings,
        competition=competition,
        name=name,
        predictions_file=path,
        reported_accuracy=reported_accuracy,
    )
    enqueue_classifier(db_session=db_session, settings=settings, classifier=classifier)
    db_session.commit()
    return classifier


def register_noisy(
    db_session: Session,
    settings: Settings,
    competition: Competition,
    tmp_path: Path,
    hashes: Sequence[str],
    truth: np.ndarray,
    specs: Sequence[tuple[str, float, float | None]],
    second: np.ndarray | None = None,
) -> dict[Classifier, np.ndarray]:
    """A classifier registered per (name, accuracy, reported accuracy) of `specs`, in order, predicting
    noisy_predictions(truth, accuracy, its position, second): each with its top-1 labels."""
    registered = {}
    for seed, (name, accuracy, reported) in enumerate(specs):
        labels = noisy_predictions(truth, accuracy, seed, second)
        classifier = register(
            db_session,
            settings,
            competition,
            tmp_path,
            name,
            hashes,
            labels,
            reported_accuracy=reported,
            seed=seed,
        )
        registered[classifier] = labels
    return registered


def run_select_jobs(db_session: Session, settings: Settings) -> list[tuple[int, int]]:
    """Claim and run every queued select job as the worker does (Algorithm 1 on the stored predictions);
    the pairs selected, in order."""
    done = []
    while jobs := jobs_service.claim(db_session=db_session, worker="test-worker", lease_seconds=60):
        (job,) = jobs
        assert job.kind == JobKind.select
        competition = db_session.get_one(Competition, job.competition_id)
        n_images = competition_image_count(db_session=db_session, competition_id=competition.id)
        a, b = (
            classifiers_service.read_predictions(
                settings=settings, classifier=db_session.get_one(Classifier, classifier_id), n_images=n_images
            )
            for classifier_id in (job.classifier_id, job.other_classifier_id)
        )
        excluded = np.zeros(n_images, dtype=bool)
        excluded[jobs_service.excluded_ordinals(db_session=db_session, competition_id=competition.id)] = True
        selection = competition_selection(competition, a, b, excluded)
        jobs_service.complete_select(
            db_session=db_session,
            job_id=job.id,
            lease_token=job.lease_token,
            selection=selection,
            diagnosis=competition_diagnosis(competition, a, b, selection, excluded),
        )
        db_session.commit()
        done.append((job.classifier_id, job.other_classifier_id))
    return done


def annotators(db_session: Session, count: int, prefix: str = "voter") -> list[User]:
    """count annotator accounts."""
    users = [
        users_service.create_user(
            db_session=db_session, username=f"{prefix}{index}", role=Role.annotator, password=TEST_PASSWORD
        )
        for index in range(count)
    ]
    db_session.commit()
    return users


def vote(
    db_session: Session,
    competition: Competition,
    voters: Sequence[User],
    contains: Contains,
    hashes: Sequence[str],
    limit: int | None = None,
) -> int:
    """Each voter labels images from the queue until none is left for them (or `limit` images), answering
    every question truthfully by `contains`; the number of images labelled."""
    ordinal_of = {sha256: ordinal for ordinal, sha256 in enumerate(hashes)}
    labelled = 0
    for voter in voters:
        for _ in range(limit if limit is not None else 10**6):
            item = next_item(db_session=db_session, competition=competition, user=voter).item
            if item is None:
                break
            ordinal = ordinal_of[item.image_sha256]
            submit_answers(
                db_session=db_session,
                competition=competition,
                user=voter,
                answers=[
                    Answer(q.question_id, contains(ordinal, q.class_index), 1.0) for q in item.questions
                ],
            )
            db_session.commit()
            labelled += 1
    return labelled


def noisy_predictions(
    truth: np.ndarray, accuracy: float, seed: int, second: np.ndarray | None = None
) -> np.ndarray:
    """Top-1 labels equal to the truth with probability `accuracy`; otherwise the image's second digit where
    it has one (second ≥ 0), else another digit."""
    rng = np.random.default_rng(seed)
    wrong = (truth + rng.integers(1, N_CLASSES, len(truth))) % N_CLASSES
    if second is not None:
        wrong = np.where(second >= 0, second, wrong)
    return np.where(rng.random(len(truth)) < accuracy, truth, wrong)
