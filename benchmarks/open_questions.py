"""A competition full of open labelling questions, filled in bulk, for the labelling and soak benchmarks.

Images go in by SQL (no files: the benchmarks never fetch them), classifiers are marked ready without
predictions, and pairs go through the labelling service (k = K selected and RESERVE reserve images per
pair, two different labels per image, so two questions per image).
"""

from __future__ import annotations

import hashlib
import random
from itertools import combinations, islice

import numpy as np
from sqlalchemy import Engine, insert, select
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.base import utcnow
from app.images.models import CompetitionImage, Image
from app.labelling.models import Question
from app.labelling.subsets import store_pair_subset

K, RESERVE, NUM_CLASSES = 30, 2, 1000
INSERT_BATCH = 10_000


def batched(iterable, size):
    """Lists of at most size items."""
    iterator = iter(iterable)
    while batch := list(islice(iterator, size)):
        yield batch


def open_questions_competition(
    db_session: Session, name: str, questions: int, seed: int
) -> tuple[Competition, dict[int, bool]]:
    """A competition named `name` with at least `questions` open questions (flushed, not committed), and
    each question's hidden truth (yes or no, at random)."""
    rng = np.random.default_rng(seed)
    competition = create_competition(db_session=db_session, spec=CompetitionCreate(name=name, k=K))
    n_pairs = -(-questions // (2 * K))
    n_classifiers = next(m for m in range(2, 1000) if m * (m - 1) // 2 >= n_pairs)
    classifiers = [
        Classifier(
            competition_id=competition.id,
            name=f"{name}-{index}",
            source=ClassifierSource.predictions_file,
            status=ClassifierStatus.ready,
        )
        for index in range(n_classifiers)
    ]
    db_session.add_all(classifiers)
    db_session.flush()
    image_ids = _bulk_images(db_session, competition.id, name, n_pairs * (K + RESERVE))
    for number, (a, b) in enumerate(islice(combinations([c.id for c in classifiers], 2), n_pairs)):
        chosen = image_ids[number * (K + RESERVE) : (number + 1) * (K + RESERVE)]
        labels = rng.choice(NUM_CLASSES, size=(len(chosen), 2))
        labels[:, 1] = (labels[:, 0] + 1 + labels[:, 1] % (NUM_CLASSES - 1)) % NUM_CLASSES
        store_pair_subset(
            db_session=db_session,
            competition=competition,
            classifier_a_id=a,
            classifier_b_id=b,
            entries=[
                (image_id, 1.0 - position / 1000, int(la), int(lb), 0.9, 0.9)
                for position, (image_id, (la, lb)) in enumerate(zip(chosen, labels, strict=True))
            ],
        )
    truth_rng = random.Random(seed)
    question_ids = db_session.scalars(
        select(Question.id).where(Question.competition_id == competition.id).order_by(Question.id)
    )
    return competition, {question_id: truth_rng.random() < 0.5 for question_id in question_ids}


def analyze(engine: Engine) -> None:
    """Give the planner statistics of the bulk-loaded tables, as after any bulk load: autovacuum would
    only get to it a minute later, and until then the queue's plans assume empty tables."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql("ANALYZE")


def _bulk_images(db_session: Session, competition_id: int, name: str, count: int) -> list[int]:
    """Insert `count` image rows (no files) into the competition in order; their ids."""
    now = utcnow()
    first_new = db_session.scalar(select(Image.id).order_by(Image.id.desc()).limit(1)) or 0
    for batch in batched(range(count), INSERT_BATCH):
        db_session.execute(
            insert(Image),
            [
                {
                    "sha256": hashlib.sha256(f"{name}-{i}".encode()).hexdigest(),
                    "format": "jpeg",
                    "width": 640,
                    "height": 480,
                    "bytes": 1,
                    "original_name": f"{i}.jpg",
                    "created_at": now,
                }
                for i in batch
            ],
        )
    image_ids = list(db_session.scalars(select(Image.id).where(Image.id > first_new).order_by(Image.id)))
    for batch in batched(enumerate(image_ids), INSERT_BATCH):
        db_session.execute(
            insert(CompetitionImage),
            [
                {"competition_id": competition_id, "image_id": image_id, "ordinal": i, "added_at": now}
                for i, image_id in batch
            ],
        )
    return image_ids
