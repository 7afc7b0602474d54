"""A small, fully built competition on a committed database, for fuzzing, access and leak tests.

Three classifiers (prediction files) over 40 real images, every pair selected through the job queue,
votes from two annotators on every image and a third on some, so some questions are decided and some
are open; a snapshot, a failed job and tokens for every role. Labels and classifier names are words that
appear nowhere else in the service's pages, so a response that pairs them can be found by searching it.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.images.models import Image
from app.jobs.enums import JobKind, JobStatus
from app.jobs.models import Job
from app.labelling.models import PairImage, PairImageRole, PairSubset, Question
from app.leaderboard.snapshots import freeze_leaderboard
from app.settings import Settings
from app.users import service as users_service
from app.users.models import Role, User
from tests.conftest import TEST_PASSWORD
from tests.leaderboard.scenario import (
    annotators,
    corpus,
    register_noisy,
    run_select_jobs,
    vote,
)

CLASSES = (
    "quokka",
    "pangolin",
    "okapi",
    "tapir",
    "kinkajou",
    "axolotl",
    "narwhal",
    "dugong",
    "fossa",
    "ibex",
)
TAXONOMY = f"""\
root: beast
classes: [{", ".join(CLASSES)}]
children:
  beast: [landish, wettish]
  landish: [quokka, pangolin, okapi, tapir, kinkajou, fossa, ibex]
  wettish: [axolotl, narwhal, dugong]
"""
CLASSIFIERS = (("model-aurochs", 0.8, 81.0), ("model-basilisk", 0.55, 77.0), ("model-chimera", 0.35, None))
N_IMAGES = 40


@dataclass
class World:
    """What the tests need to address the built competition and to know its hidden state."""

    competition_id: int
    competition_name: str
    hashes: list[str]
    classifier_ids: list[int]
    classifier_names: dict[int, str]
    top1: dict[int, np.ndarray]
    truth: np.ndarray
    user_ids: dict[str, int]
    tokens: dict[str, str]
    snapshot_slug: str
    job_ids: list[int]
    failed_job_id: int
    extra: dict = field(default_factory=dict)

    def headers(self, role: str) -> dict[str, str]:
        """Bearer headers of the account playing this role (admin, annotator, worker); {} for anonymous."""
        return {"Authorization": f"Bearer {self.tokens[role]}"} if role in self.tokens else {}


def contains_for(truth: np.ndarray):
    """The annotators' truth: an image shows exactly its class."""
    return lambda ordinal, class_index: class_index == truth[ordinal]


def build_world(db_session: Session, settings: Settings, tmp_path: Path) -> World:
    """Build the competition through the services, committing as it goes (module docstring)."""
    competition = create_competition(
        db_session=db_session,
        spec=CompetitionCreate(
            name="beasts",
            taxonomy="custom",
            taxonomy_source=TAXONOMY,
            k=6,
            confidence_threshold=0.0,
            max_per_label=1000,
        ),
    )
    hashes = corpus(db_session, settings, competition, N_IMAGES)
    db_session.commit()
    truth = np.random.default_rng(3).integers(0, len(CLASSES), N_IMAGES)
    predicting = register_noisy(db_session, settings, competition, tmp_path, hashes, truth, CLASSIFIERS)
    top1 = {classifier.id: labels for classifier, labels in predicting.items()}
    run_select_jobs(db_session, settings)
    contains = contains_for(truth)
    voters = annotators(db_session, 3, prefix="seeded-voter")
    vote(db_session, competition, voters[:2], contains, hashes)
    vote(db_session, competition, voters[2:], contains, hashes, limit=4)

    users = {}
    for role in (Role.admin, Role.annotator, Role.worker):
        users[role.value] = users_service.create_user(
            db_session=db_session,
            username=f"the-{role.value}",
            role=role,
            password=None if role == Role.worker else TEST_PASSWORD,
        )
    tokens = {
        role: users_service.create_api_token(db_session=db_session, user=user, name="tests")
        for role, user in users.items()
    }
    admin = users["admin"]
    slug = freeze_leaderboard(db_session=db_session, competition=competition, note="seeded", user=admin).slug
    failed = Job(
        competition_id=competition.id,
        kind=JobKind.predict,
        key="predict:seeded-failure",
        classifier_id=next(iter(top1)),
        shard_start=0,
        shard_end=1,
        max_attempts=1,
        status=JobStatus.failed,
        error="seeded failure",
        progress_total=1,
    )
    db_session.add(failed)
    db_session.commit()
    classifiers = db_session.scalars(
        select(Classifier).where(Classifier.competition_id == competition.id).order_by(Classifier.id)
    ).all()
    return World(
        competition_id=competition.id,
        competition_name=competition.name,
        hashes=hashes,
        classifier_ids=[c.id for c in classifiers],
        classifier_names={c.id: c.name for c in classifiers},
        top1=top1,
        truth=truth,
        user_ids={
            **{role: user.id for role, user in users.items()},
            **{voter.username: voter.id for voter in voters},
        },
        tokens=tokens,
        snapshot_slug=slug,
        job_ids=list(db_session.scalars(select(Job.id).order_by(Job.id))),
        failed_job_id=failed.id,
    )


def open_questions(db_session: Session, competition_id: int) -> list[tuple[str, int]]:
    """(image sha256, class index) of every question still open (no outcome, not gold)."""
    return [
        (sha256, class_index)
        for sha256, class_index in db_session.execute(
            select(Image.sha256, Question.class_index)
            .join(Image, Image.id == Question.image_id)
            .where(Question.competition_id == competition_id, Question.outcome.is_(None))
        ).all()
    ]


def selected_images(db_session: Session, competition_id: int) -> set[str]:
    """Hashes of the images some pair selected."""
    return set(
        db_session.scalars(
            select(Image.sha256)
            .join(PairImage, PairImage.image_id == Image.id)
            .join(PairSubset, PairSubset.id == PairImage.subset_id)
            .where(PairSubset.competition_id == competition_id, PairImage.role == PairImageRole.selected)
        )
    )


def competition_of(db_session: Session, world: World) -> Competition:
    """The world's competition, loaded in this session."""
    return db_session.get_one(Competition, world.competition_id)


def user_of(db_session: Session, world: World, role: str) -> User:
    """The account of a role, loaded in this session."""
    return db_session.get_one(User, world.user_ids[role])
