"""A voted digits competition for the leaderboard tests; the live server and browser of tests/support."""

from dataclasses import dataclass

import numpy as np
import pytest
from sqlalchemy import select

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.labelling.models import Question, Vote
from tests.leaderboard.scenario import (
    N_CLASSES,
    annotators,
    corpus,
    digits_competition,
    register_noisy,
    run_select_jobs,
    vote,
)
from tests.support.browser import browser, live_server  # noqa: F401

N_IMAGES = 80
ACTIVE = (("alpha", 0.85, 80.1), ("beta", 0.5, 76.0), ("gamma", 0.3, None), ("delta", 0.6, 78.5))
RETIRED = ("omega", 0.7, 90.0)


@dataclass
class VotedCompetition:
    """Four active classifiers and a retired one, all pairs selected, every image voted by two annotators
    and some by a third (so some questions are decided and some are open); plus a failed and a pending one."""

    competition: Competition
    hashes: list[str]
    truth: np.ndarray
    second: np.ndarray
    active: list[Classifier]
    retired: Classifier
    failed: Classifier
    pending: Classifier
    top1: dict[int, np.ndarray]
    decided_images: set[int]

    def contains(self, ordinal: int, class_index: int) -> bool:
        """The annotators' truth: the image shows its digit, and every fifth image a second digit too."""
        return class_index == self.truth[ordinal] or class_index == self.second[ordinal]


def truth_of(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each image's digit, and a second digit on every fifth image (-1: none), seeded."""
    truth = np.random.default_rng(7).integers(0, N_CLASSES, n)
    second = np.where(np.arange(n) % 5 == 0, (truth + 5) % N_CLASSES, -1)
    return truth, second


@pytest.fixture
def voted(db_session, settings, tmp_path) -> VotedCompetition:
    """The voted competition of VotedCompetition, in the test's rolled-back transaction."""
    return build_voted(db_session, settings, tmp_path)


def build_voted(db_session, settings, tmp_path) -> VotedCompetition:
    """Build the voted competition of VotedCompetition through the services, committing as it goes."""
    competition = digits_competition(db_session)
    hashes = corpus(db_session, settings, competition, N_IMAGES)
    db_session.commit()
    truth, second = truth_of(N_IMAGES)
    predicting = register_noisy(
        db_session, settings, competition, tmp_path, hashes, truth, (*ACTIVE, RETIRED), second
    )
    registered = list(predicting)
    top1 = {classifier.id: labels for classifier, labels in predicting.items()}
    run_select_jobs(db_session, settings)
    world = VotedCompetition(
        competition, hashes, truth, second, registered[:-1], registered[-1], None, None, top1, set()
    )
    voters = annotators(db_session, 3)
    vote(db_session, competition, voters[:2], world.contains, hashes)
    vote(db_session, competition, voters[2:], world.contains, hashes, limit=25)
    world.decided_images = set(
        db_session.scalars(
            select(Question.image_id)
            .join(Vote, Vote.question_id == Question.id)
            .where(Vote.user_id == voters[2].id)
        )
    )
    world.failed = Classifier(
        competition_id=competition.id,
        name="broken",
        source=ClassifierSource.timm_pretrained,
        pretrained_tag="resnet18.a1_in1k",
        status=ClassifierStatus.failed,
        error="download refused",
    )
    world.pending = Classifier(
        competition_id=competition.id,
        name="newcomer",
        source=ClassifierSource.timm_pretrained,
        pretrained_tag="resnet18.a1_in1k",
        status=ClassifierStatus.predicting,
    )
    db_session.add_all([world.failed, world.pending])
    db_session.commit()
    return world
