"""Test data for labelling: images in a competition, classifiers, and stored pair selections."""

import hashlib
import re
from datetime import timedelta
from itertools import combinations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.images.models import CompetitionImage, Image
from app.images.store import ImageStore
from app.labelling.annotating.answers import submit_answers
from app.labelling.annotating.queue import next_item
from app.labelling.models import Assignment, AssignmentStatus, PairSubset
from app.labelling.subsets import store_pair_subset
from app.labelling.types import Answer, PairEntry, PresentedItem
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_PASSWORD
from tests.support.images import image_bytes


def add_images(
    db_session: Session, competition: Competition, count: int, store: ImageStore | None = None, seed: int = 0
) -> list[int]:
    """count new PNG images in the competition (files written to the store when given); their ids."""
    first_ordinal = db_session.scalar(
        select(func.count()).where(CompetitionImage.competition_id == competition.id)
    )
    ids = []
    for offset in range(count):
        data = image_bytes(seed + offset, width=64, height=48)
        sha256 = hashlib.sha256(data).hexdigest()
        if store is not None:
            store.put(sha256, "png", data, data)
        image = Image(
            sha256=sha256, format="png", width=64, height=48, bytes=len(data), original_name="x.png"
        )
        db_session.add(image)
        db_session.flush()
        db_session.add(
            CompetitionImage(competition_id=competition.id, image_id=image.id, ordinal=first_ordinal + offset)
        )
        ids.append(image.id)
    db_session.flush()
    return ids


def add_classifiers(db_session: Session, competition: Competition, count: int) -> list[int]:
    """count ready classifiers in the competition; their ids in ascending order."""
    classifiers = [
        Classifier(
            competition_id=competition.id,
            name=f"model-{competition.id}-{index}",
            source=ClassifierSource.predictions_file,
            status=ClassifierStatus.ready,
        )
        for index in range(count)
    ]
    db_session.add_all(classifiers)
    db_session.flush()
    return sorted(classifier.id for classifier in classifiers)


def entries(image_ids: list[int], labels: list[tuple[int, int]]) -> list[PairEntry]:
    """Selection entries in order, with decreasing distances and confident predictions."""
    return [
        (image_id, 1.0 - position / 100, label_a, label_b, 0.9, 0.95)
        for position, (image_id, (label_a, label_b)) in enumerate(zip(image_ids, labels, strict=True))
    ]


def store_pair(
    db_session: Session,
    competition: Competition,
    pair: tuple[int, int],
    image_ids: list[int],
    first_label: int,
) -> PairSubset:
    """Store a pair's selection of these images; image i gets labels first_label + 2i and + 2i + 1."""
    labels = [(first_label + 2 * i, first_label + 2 * i + 1) for i in range(len(image_ids))]
    return store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=pair[0],
        classifier_b_id=pair[1],
        entries=entries(image_ids, labels),
    )


def labelling_competition(
    db_session: Session,
    competition: Competition,
    classifiers: int,
    images_per_pair: int,
    store: ImageStore | None = None,
) -> list[PairSubset]:
    """Every pair of `classifiers` new classifiers with its own `images_per_pair` new images (k of them
    selected, the rest reserve), all different labels."""
    classifier_ids = add_classifiers(db_session, competition, classifiers)
    subsets = []
    for number, pair in enumerate(combinations(classifier_ids, 2)):
        image_ids = add_images(db_session, competition, images_per_pair, store, seed=1000 * (number + 1))
        subsets.append(store_pair(db_session, competition, pair, image_ids, first_label=0))
    db_session.commit()
    return subsets


def answer_next(
    db_session: Session, competition: Competition, user, answer: bool = True
) -> PresentedItem | None:
    """The annotator takes the next item and answers all its questions with `answer`; the item, or None."""
    item = next_item(db_session=db_session, competition=competition, user=user).item
    if item is not None:
        submit_answers(
            db_session=db_session,
            competition=competition,
            user=user,
            answers=[Answer(q.question_id, answer, 2.0) for q in item.questions],
        )
        db_session.commit()
    return item


class LabellingCalls:
    """One caller's labelling API through a test client, each call answered 200."""

    def __init__(self, client, competition_id: int, headers: dict[str, str]):
        self.client, self.headers = client, headers
        self.path = f"/api/v1/competitions/{competition_id}/labelling"

    def post(self, path: str, body: dict | None = None) -> dict:
        """POST …/labelling/{path} with this JSON body; the response's JSON."""
        response = self.client.post(f"{self.path}/{path}", json=body, headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()

    def me(self) -> dict:
        """GET …/labelling/me."""
        response = self.client.get(f"{self.path}/me", headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()


def let_time_pass(db_session: Session, seconds: float) -> None:
    """The annotators look at the images leased to them for `seconds`: each running lease's hand-out time
    moves back by that much (the server's clock bounds the seconds an answer is credited)."""
    leases = db_session.scalars(select(Assignment).where(Assignment.status == AssignmentStatus.leased)).all()
    for lease in leases:
        lease.leased_at -= timedelta(seconds=seconds)
    db_session.commit()


def users_with_tokens(
    db_session: Session, prefix: str, count: int, role: Role = Role.annotator
) -> list[tuple[int, str]]:
    """count new accounts named prefix0, prefix1, … with a password; each one's (id, API token)."""
    accounts = []
    for index in range(count):
        user = users_service.create_user(
            db_session=db_session, username=f"{prefix}{index}", role=role, password="long enough"
        )
        accounts.append((user.id, users_service.create_api_token(db_session=db_session, user=user, name="t")))
    return accounts


def sign_in(client, username: str) -> None:
    """Sign the test client in through the login form."""
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text).group(1)
    signed_in = client.post(
        "/login",
        data={"username": username, "password": TEST_PASSWORD, "csrf_token": csrf, "next": "/"},
        follow_redirects=False,
    )
    assert signed_in.status_code == 303
