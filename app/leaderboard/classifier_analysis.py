"""Where one classifier fails, on MAD labels: its worst classes and superclasses, its most perplexing
images, and the stability of the ranking versus k (paper Fig. 5)."""

from typing import NamedTuple

import numpy as np
from sqlalchemy import and_, case, select
from sqlalchemy.orm import Session, aliased

from app.classifiers.models import Classifier
from app.classifiers.service import readable_predictions
from app.competitions.models import Competition
from app.competitions.service import competition_taxonomy
from app.core.analysis import (
    GroupPrecision,
    c_perplexity,
    ranking_stability,
    worst_classes,
    worst_superclasses,
    x_perplexity,
)
from app.images.models import CompetitionImage, Image
from app.images.service import competition_image_count
from app.labelling.models import PairImage, PairImageRole, PairSubset, Question
from app.labelling.results import image_withheld, question_of_pair_image
from app.leaderboard.schemas import (
    ClassifierAnalysisRead,
    ClassifierRef,
    GroupPrecisionRead,
    PerplexityImage,
    StabilityRead,
)
from app.leaderboard.standings import finite_or_none, ranked_pairs
from app.settings import Settings

WORST_SHOWN = 10
MIN_CLASS_SUPPORT = 3
MIN_SUPERCLASS_SUPPORT = 10
PERPLEXING_SHOWN = 12


class OwnPrediction(NamedTuple):
    """The analysed classifier's prediction on an image of one of its pairs, and whether it was right
    (None while undecided)."""

    image_id: int
    ordinal: int
    label: int
    prob: float
    correct: bool | None


def classifier_analysis(
    *, db_session: Session, settings: Settings, competition: Competition, classifier: Classifier
) -> ClassifierAnalysisRead:
    """Worst classes and superclasses on MAD labels, most perplexing images, and stability versus k."""
    alpha = competition.smoothing
    pairs = ranked_pairs(db_session=db_session, competition=competition)
    judged = _own_predictions(db_session, competition, classifier)
    decided = [own for own in judged if own.correct is not None]
    predicted = np.array([own.label for own in decided], dtype=np.int64)
    correct = np.array([own.correct for own in decided], dtype=bool)
    taxonomy = competition_taxonomy(competition)
    stability = (
        ranking_stability(pairs.outcomes, len(pairs.classifiers), k=competition.k, alpha=alpha)
        if len(pairs.classifiers) > 1
        else None
    )
    return ClassifierAnalysisRead(
        competition_id=competition.id,
        classifier=ClassifierRef(id=classifier.id, name=classifier.name),
        status=classifier.status,
        labelled_predictions=len(decided),
        worst_classes=_group_reads(
            worst_classes(taxonomy, predicted, correct, MIN_CLASS_SUPPORT, count=WORST_SHOWN)
        ),
        worst_superclasses=_group_reads(
            worst_superclasses(taxonomy, predicted, correct, MIN_SUPERCLASS_SUPPORT, count=WORST_SHOWN)
        ),
        min_class_support=MIN_CLASS_SUPPORT,
        min_superclass_support=MIN_SUPERCLASS_SUPPORT,
        perplexing_images=_perplexing_images(db_session, settings, competition, pairs.classifiers, judged),
        stability=StabilityRead(
            k=competition.k if stability is None else stability.k,
            k_prime=[] if stability is None else stability.k_prime.tolist(),
            srcc=[] if stability is None else [finite_or_none(float(value)) for value in stability.srcc],
        ),
    )


def _own_predictions(
    db_session: Session, competition: Competition, classifier: Classifier
) -> list[OwnPrediction]:
    """Its prediction on each image selected by one of its pairs with no open question left and no gold
    question (see pair_gallery: predictions are public once an image is decided, and never on a gold image),
    each image once, in pair and selection order."""
    is_a = PairSubset.classifier_a_id == classifier.id
    question = aliased(Question)
    rows = db_session.execute(
        select(
            PairImage.image_id,
            CompetitionImage.ordinal,
            PairImage.label_a,
            PairImage.label_b,
            PairImage.prob_a,
            PairImage.prob_b,
            PairSubset.classifier_a_id,
            question.outcome,
        )
        .join(PairSubset, PairSubset.id == PairImage.subset_id)
        .join(
            CompetitionImage,
            and_(
                CompetitionImage.competition_id == PairSubset.competition_id,
                CompetitionImage.image_id == PairImage.image_id,
            ),
        )
        .outerjoin(question, question_of_pair_image(question, _own_label(is_a)))
        .where(
            PairSubset.competition_id == competition.id,
            (PairSubset.classifier_a_id == classifier.id) | (PairSubset.classifier_b_id == classifier.id),
            PairImage.role == PairImageRole.selected,
            ~image_withheld(competition.id),
        )
        .order_by(PairSubset.id, PairImage.position)
    ).all()
    seen: set[int] = set()
    own = []
    for row in rows:
        if row.image_id in seen:
            continue
        seen.add(row.image_id)
        mine = row.classifier_a_id == classifier.id
        own.append(
            OwnPrediction(
                row.image_id,
                row.ordinal,
                row.label_a if mine else row.label_b,
                row.prob_a if mine else row.prob_b,
                row.outcome,
            )
        )
    return own


def _own_label(is_a):
    """The analysed classifier's label column of a pair image: label_a when it is the pair's a."""
    return case((is_a, PairImage.label_a), else_=PairImage.label_b)


def _group_reads(groups: list[GroupPrecision]) -> list[GroupPrecisionRead]:
    """The API view of the core's worst classes or superclasses."""
    return [
        GroupPrecisionRead(key=group.key, name=group.name, precision=group.precision, support=group.support)
        for group in groups
    ]


def _perplexing_images(
    db_session: Session,
    settings: Settings,
    competition: Competition,
    classifiers: list[Classifier],
    own: list[OwnPrediction],
) -> list[PerplexityImage]:
    """The classifier's pair images with the highest C-perplexity over the ranked classifiers, with their
    X-perplexity on MAD labels (Example Perplexity, Sec. 2)."""
    if not own or not classifiers:
        return []
    image_ids = [prediction.image_id for prediction in own]
    ordinals = np.array([prediction.ordinal for prediction in own], dtype=np.int64)
    n_images = competition_image_count(db_session=db_session, competition_id=competition.id)
    predictions = [readable_predictions(settings, classifier, n_images) for classifier in classifiers]
    confusion = c_perplexity(np.stack([p.entropy_bits[ordinals] for p in predictions]).astype(np.float64))
    top1 = np.stack([p.top1[ordinals] for p in predictions])
    outcome_of = _decided_outcomes(db_session, competition, image_ids)
    outcomes = [
        [outcome_of.get((image_id, int(label))) for image_id, label in zip(image_ids, row, strict=True)]
        for row in top1
    ]
    judged = np.array([[outcome is not None for outcome in row] for row in outcomes], dtype=bool)
    mistakes = x_perplexity(np.array([[bool(o) for o in row] for row in outcomes], dtype=bool), judged)
    sha256_of = dict(db_session.execute(select(Image.id, Image.sha256).where(Image.id.in_(image_ids))).all())
    most_confusing = [i for i in np.argsort(-confusion, kind="stable") if np.isfinite(confusion[i])]
    return [
        PerplexityImage(
            image_sha256=sha256_of[own[i].image_id],
            thumbnail_url=f"/thumbnails/{sha256_of[own[i].image_id]}",
            c_perplexity=float(confusion[i]),
            x_perplexity=finite_or_none(float(mistakes[i])),
            label=str(competition.class_names[own[i].label]),
            prob=own[i].prob,
            correct=own[i].correct,
        )
        for i in most_confusing[:PERPLEXING_SHOWN]
    ]


def _decided_outcomes(
    db_session: Session, competition: Competition, image_ids: list[int]
) -> dict[tuple[int, int], bool]:
    """{(image_id, class_index): outcome} of the decided questions on these images."""
    rows = db_session.execute(
        select(Question.image_id, Question.class_index, Question.outcome).where(
            Question.competition_id == competition.id,
            Question.image_id.in_(image_ids),
            Question.outcome.is_not(None),
        )
    )
    return {(row.image_id, row.class_index): bool(row.outcome) for row in rows}
