"""A predict job claimed by a worker through the API, as the worker protocol's tests start from, and the
selection and diagnosis a select job stores, as the tests that check it compute them."""

from dataclasses import dataclass

import numpy as np

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.classifiers.models import Classifier
from app.classifiers.prediction_store import Predictions
from app.competitions.models import Competition
from app.competitions.service import competition_taxonomy
from app.core.selection import PairDiagnosis, PairSelection, diagnose_pair, select_pair
from app.jobs.models import Job
from app.jobs.service import enqueue_predictions
from app.users.models import Role
from tests.conftest import bearer, make_user
from tests.jobs.test_classifier_registration import add_images


@dataclass(frozen=True)
class ClaimedShard:
    """A timm-pretrained classifier's predict job over a competition's images, claimed by a worker."""

    classifier: Classifier
    job: Job
    claimed: dict
    worker: dict[str, str]

    @property
    def url(self) -> str:
        """Where the worker uploads the shard's predictions."""
        return f"/api/v1/jobs/{self.claimed['id']}/predictions"

    @property
    def lease(self) -> dict[str, str]:
        """The form field proving the worker holds the lease."""
        return {"lease_token": self.claimed["lease_token"]}


def claimed_shard(client, db_session, competition, images: int) -> ClaimedShard:
    """`images` images in the competition and a classifier to predict them in one job, claimed through
    POST /api/v1/jobs/claim by a new worker account."""
    add_images(db_session, competition, images)
    classifier = Classifier(
        competition_id=competition.id,
        name="remote",
        source=ClassifierSource.timm_pretrained,
        pretrained_tag="resnet18.a1_in1k",
        architecture="resnet18",
        status=ClassifierStatus.predicting,
    )
    db_session.add(classifier)
    db_session.flush()
    (job,) = enqueue_predictions(db_session=db_session, classifier=classifier, max_attempts=3, shard_size=100)
    db_session.commit()
    worker = bearer(db_session, make_user(db_session, "gpu-box", Role.worker))
    (claimed,) = client.post("/api/v1/jobs/claim", json={"worker": "gpu-box"}, headers=worker).json()["jobs"]
    return ClaimedShard(classifier, job, claimed, worker)


def competition_selection(
    competition: Competition, a: Predictions, b: Predictions, excluded: np.ndarray | None = None
) -> PairSelection:
    """The core's selection of a pair (Algorithm 1, then a reserve of k) with the competition's settings."""
    return select_pair(
        a.top1,
        a.prob,
        b.top1,
        b.prob,
        competition_taxonomy(competition).distance_matrix(),
        k=competition.k,
        threshold=competition.confidence_threshold,
        max_per_label=competition.max_per_label,
        reserve_size=competition.k,
        excluded=excluded,
        rule=competition.threshold_rule,
    )


def competition_diagnosis(
    competition: Competition,
    a: Predictions,
    b: Predictions,
    selection: PairSelection,
    excluded: np.ndarray | None = None,
) -> PairDiagnosis:
    """The core's diagnosis of a pair's selection with the competition's threshold, as the worker sends it."""
    return diagnose_pair(
        a.top1,
        a.prob,
        b.top1,
        b.prob,
        selected=selection.n_selected,
        threshold=competition.confidence_threshold,
        rule=competition.threshold_rule,
        excluded=excluded,
    )


def diagnosis_upload(selected: int) -> dict:
    """A consistent diagnosis for a selection upload of `selected` images under T = 0.8."""
    found = diagnose_pair(
        np.arange(selected) % 5,
        np.full(selected, 0.9),
        (np.arange(selected) + 1) % 5,
        np.full(selected, 0.85),
        selected=selected,
    )
    return found.as_dict()
