"""The leaderboard: the MAD ranking of a competition from its decided questions, and what it reveals.

Ranked classifiers: those neither failed nor retired that have predictions (ready) or stored pair
selections, in registration order (Classifier.id), which is the row order of A, B and n. Pairs with a
retired or failed classifier are ignored; failed and not-yet-ready classifiers are listed as unranked.
The labels of a pair are its selected images whose two questions are decided (labelling's
`pair_outcomes`); α is the competition's smoothing. The bootstrap is seeded, so the same votes always
give the same numbers, and the rankings of the latest counts are remembered per process (the 1000
resamples are most of a request's time; every admin poll and classifier page asks for them).
"""

import math
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

import numpy as np
from sqlalchemy import and_, case, exists, select
from sqlalchemy.orm import Session, aliased

from app.classifiers.models import Classifier, ClassifierStatus
from app.classifiers.prediction_store import Predictions
from app.classifiers.service import list_classifiers, read_predictions
from app.competitions.models import Competition
from app.competitions.service import competition_taxonomy
from app.core.analysis import (
    c_perplexity,
    case_shares,
    krcc,
    ranking_stability,
    srcc,
    x_perplexity,
)
from app.core.ranking import (
    BootstrapIntervals,
    PairCounts,
    Ranking,
    bootstrap_perron,
    count_outcomes,
    dominance_matrix,
    pairwise_accuracy,
    perron_rank,
    rank_classifiers,
    ranks_from_scores,
)
from app.errors import Conflict, NotFound
from app.images.models import CompetitionImage, Image
from app.jobs.service import competition_image_count
from app.labelling.models import PairImage, PairImageRole, PairSubset, Question
from app.labelling.service import pair_outcomes, question_of_pair_image
from app.leaderboard.schemas import (
    BootstrapSettings,
    CaseSharesRead,
    ClassifierAnalysisRead,
    ClassifierRef,
    ClassifierStanding,
    GalleryImage,
    GroupPrecisionRead,
    HistoryPoint,
    HistoryRead,
    LeaderboardRead,
    MatricesRead,
    PairGalleryRead,
    PerplexityImage,
    StabilityRead,
    UnrankedClassifier,
)
from app.settings import Settings

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_LEVEL = 0.95
BOOTSTRAP_SEED = 0
PROVISIONAL_RANK_SPREAD = 2
STABLE_K = 15
"""Paper Fig. 5: the ranking from each pair's first k images agrees with k = 30 (SRCC > 0.9) once k > 15."""
PROVISIONAL_RULE = (
    f"A classifier is provisional while its {BOOTSTRAP_LEVEL:.0%} bootstrap rank interval spans more than "
    f"{PROVISIONAL_RANK_SPREAD + 1} ranks, or while one of its pairs has fewer than min(k, {STABLE_K}) "
    f"labelled images (paper Fig. 5: rankings settle once k > {STABLE_K})."
)
HISTORY_POINTS = 24
WORST_SHOWN = 10
MIN_CLASS_SUPPORT = 3
MIN_SUPERCLASS_SUPPORT = 10
PERPLEXING_SHOWN = 12
RANKINGS_REMEMBERED = 64
UNRANKABLE = (ClassifierStatus.failed, ClassifierStatus.retired)

IndexOutcomes = dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class RankedPairs:
    """The ranked classifiers in registration order and their pairs' outcomes by classifier index."""

    classifiers: list[Classifier]
    unranked: list[UnrankedClassifier]
    outcomes: IndexOutcomes


def ranked_pairs(*, db_session: Session, competition: Competition) -> RankedPairs:
    """Who is ranked (module docstring) and the outcomes of the pairs between them, in selection order."""
    by_pair = pair_outcomes(db_session=db_session, competition=competition)
    with_subset = {classifier_id for pair in by_pair for classifier_id in pair}
    ranked, unranked = [], []
    for classifier in list_classifiers(db_session=db_session, competition_id=competition.id):
        if classifier.status == ClassifierStatus.retired:
            continue
        if classifier.status == ClassifierStatus.failed:
            unranked.append(_unranked(classifier, classifier.error or "no reason given"))
        elif classifier.status == ClassifierStatus.ready or classifier.id in with_subset:
            ranked.append(classifier)
        else:
            unranked.append(_unranked(classifier, "waiting for its predictions"))
    index_of = {classifier.id: index for index, classifier in enumerate(ranked)}
    outcomes = {
        (index_of[a_id], index_of[b_id]): (labels[:, 0], labels[:, 1])
        for (a_id, b_id), labels in by_pair.items()
        if a_id in index_of and b_id in index_of
    }
    return RankedPairs(ranked, unranked, outcomes)


def _unranked(classifier: Classifier, reason: str) -> UnrankedClassifier:
    """The leaderboard entry of a classifier that is not ranked, with why."""
    return UnrankedClassifier(
        classifier_id=classifier.id, name=classifier.name, status=classifier.status, reason=reason
    )


def _finite_or_none(value: float) -> float | None:
    """NaN (an undefined correlation) as None."""
    return None if math.isnan(value) else value


def compute_leaderboard(*, db_session: Session, competition: Competition) -> LeaderboardRead:
    """Perron rank with bootstrap intervals, HodgeRank / Bradley–Terry / win rate, Table 1, A, B and n."""
    alpha = competition.smoothing
    pairs = ranked_pairs(db_session=db_session, competition=competition)
    classifiers, m = pairs.classifiers, len(pairs.classifiers)
    counts = count_outcomes(pairs.outcomes, m)
    shares = case_shares(counts)
    common = dict(
        competition_id=competition.id,
        competition_name=competition.name,
        smoothing=alpha,
        bootstrap=BootstrapSettings(
            n_resamples=BOOTSTRAP_RESAMPLES, level=BOOTSTRAP_LEVEL, seed=BOOTSTRAP_SEED
        ),
        provisional_rule=PROVISIONAL_RULE,
        unranked=pairs.unranked,
        case_shares=CaseSharesRead(
            case_i=shares.case_i, case_ii=shares.case_ii, case_iii=shares.case_iii, images=shares.images
        ),
    )
    if m == 0:
        return LeaderboardRead(
            **common,
            classifiers=[],
            lambda_max=None,
            consistency_index=None,
            srcc=None,
            krcc=None,
            correlated_classifiers=0,
            matrices=MatricesRead(classifier_ids=[], accuracy=[], dominance=[], labelled=[]),
        )
    ranking, intervals = rank_with_intervals(counts, alpha)
    comparison = _accuracy_comparison(classifiers, ranking.perron.scores)
    mad_ranks = ranking.ranks
    hodge_ranks = ranks_from_scores(ranking.hodge)
    bradley_terry_ranks = ranks_from_scores(ranking.bradley_terry)
    win_rate_ranks = ranks_from_scores(ranking.win_rate)
    off_diagonal = ~np.eye(m, dtype=bool)
    fewest = np.where(off_diagonal, counts.n, np.iinfo(np.int64).max).min(axis=1) if m > 1 else np.zeros(1)
    settled_with = min(competition.k, STABLE_K)
    standings = []
    for i, classifier in enumerate(classifiers):
        spread = int(intervals.rank_high[i] - intervals.rank_low[i])
        accuracy_rank, mad_rank_among_reported = comparison.ranks.get(i, (None, None))
        standings.append(
            ClassifierStanding(
                classifier_id=classifier.id,
                name=classifier.name,
                status=classifier.status,
                mad_score=float(ranking.perron.scores[i]),
                mad_rank=int(mad_ranks[i]),
                score_low=float(intervals.score_low[i]),
                score_high=float(intervals.score_high[i]),
                rank_low=int(intervals.rank_low[i]),
                rank_high=int(intervals.rank_high[i]),
                provisional=spread > PROVISIONAL_RANK_SPREAD or int(fewest[i]) < settled_with,
                hodge_score=float(ranking.hodge[i]),
                hodge_rank=int(hodge_ranks[i]),
                bradley_terry_score=float(ranking.bradley_terry[i]),
                bradley_terry_rank=int(bradley_terry_ranks[i]),
                win_rate=float(ranking.win_rate[i]),
                win_rate_rank=int(win_rate_ranks[i]),
                labelled_images=int(counts.n[i].sum()),
                fewest_labelled_in_a_pair=int(fewest[i]),
                reported_accuracy=classifier.reported_accuracy,
                accuracy_rank=accuracy_rank,
                mad_rank_among_reported=mad_rank_among_reported,
                delta_rank=None if accuracy_rank is None else accuracy_rank - mad_rank_among_reported,
            )
        )
    return LeaderboardRead(
        **common,
        classifiers=standings,
        lambda_max=ranking.perron.lambda_max,
        consistency_index=ranking.perron.consistency_index,
        srcc=comparison.srcc,
        krcc=comparison.krcc,
        correlated_classifiers=len(comparison.ranks),
        matrices=MatricesRead(
            classifier_ids=[classifier.id for classifier in classifiers],
            accuracy=ranking.accuracy.tolist(),
            dominance=ranking.dominance.tolist(),
            labelled=counts.n.tolist(),
        ),
    )


def rank_with_intervals(counts: PairCounts, alpha: float) -> tuple[Ranking, BootstrapIntervals]:
    """rank_classifiers and the seeded bootstrap_perron of the counts, remembered per process. Both are
    pure functions of (counts, α), so the cache is keyed on the counts themselves and is never stale."""
    return _remembered_ranking(
        alpha, counts.m, counts.n.tobytes(), counts.correct.tobytes(), counts.wins.tobytes()
    )


@lru_cache(maxsize=RANKINGS_REMEMBERED)
def _remembered_ranking(
    alpha: float, m: int, n: bytes, correct: bytes, wins: bytes
) -> tuple[Ranking, BootstrapIntervals]:
    """rank_with_intervals of counts given as the bytes of their m×m int64 arrays."""
    counts = PairCounts(*(np.frombuffer(array, dtype=np.int64).reshape(m, m) for array in (n, correct, wins)))
    intervals = bootstrap_perron(
        counts, alpha, n_resamples=BOOTSTRAP_RESAMPLES, level=BOOTSTRAP_LEVEL, seed=BOOTSTRAP_SEED
    )
    return rank_classifiers(counts, alpha), intervals


@dataclass(frozen=True)
class AccuracyComparison:
    """Table 1: {index: (accuracy rank, MAD rank)} among classifiers reporting an accuracy; SRCC, KRCC."""

    ranks: dict[int, tuple[int, int]]
    srcc: float | None
    krcc: float | None


def _accuracy_comparison(classifiers: list[Classifier], mad_scores: np.ndarray) -> AccuracyComparison:
    """Accuracy rank and MAD rank over the classifiers that report an accuracy, and their correlations."""
    reporting = [i for i, classifier in enumerate(classifiers) if classifier.reported_accuracy is not None]
    if not reporting:
        return AccuracyComparison({}, None, None)
    accuracy_ranks = ranks_from_scores([classifiers[i].reported_accuracy for i in reporting])
    mad_ranks = ranks_from_scores(mad_scores[reporting])
    ranks = {
        i: (int(accuracy_rank), int(mad_rank))
        for i, accuracy_rank, mad_rank in zip(reporting, accuracy_ranks, mad_ranks, strict=True)
    }
    if len(reporting) < 2:
        return AccuracyComparison(ranks, None, None)
    return AccuracyComparison(
        ranks,
        _finite_or_none(srcc(mad_ranks, accuracy_ranks)),
        _finite_or_none(krcc(mad_ranks, accuracy_ranks)),
    )


# History --------------------------------------------------------------------------------------------------


def _decided_pair_images(db_session: Session, competition: Competition) -> list[tuple]:
    """(a_id, b_id, correct_a, correct_b, labelled_at) of every selected pair image whose two questions are
    decided; labelled_at is when the later of its two questions was decided, or when the pair was selected
    if that came later (a new classifier's pair reuses answers given before it existed)."""
    question_a, question_b = aliased(Question), aliased(Question)
    rows = db_session.execute(
        select(
            PairSubset.classifier_a_id,
            PairSubset.classifier_b_id,
            question_a.outcome,
            question_b.outcome,
            question_a.decided_at,
            question_b.decided_at,
            PairSubset.created_at,
        )
        .join(PairImage, PairImage.subset_id == PairSubset.id)
        .join(question_a, question_of_pair_image(question_a, PairImage.label_a))
        .join(question_b, question_of_pair_image(question_b, PairImage.label_b))
        .where(
            PairSubset.competition_id == competition.id,
            PairImage.role == PairImageRole.selected,
            question_a.outcome.is_not(None),
            question_b.outcome.is_not(None),
        )
        .order_by(PairSubset.id, PairImage.position)
    ).all()
    return [(a_id, b_id, right_a, right_b, max(times)) for a_id, b_id, right_a, right_b, *times in rows]


def ranking_history(*, db_session: Session, competition: Competition) -> HistoryRead:
    """Perron ranks after each of up to 24 evenly spaced numbers of labelled pair images.

    The current labels are replayed in the order they were made (a pair image counts from its later
    decision, or from its pair's selection); a classifier takes part from its registration. Votes later
    undone or excluded are not replayed: this is how today's labels accumulated, not every state the
    leaderboard showed.
    """
    alpha = competition.smoothing
    classifiers = ranked_pairs(db_session=db_session, competition=competition).classifiers
    ranked_ids = {classifier.id for classifier in classifiers}
    rows = sorted(
        (
            (labelled_at, a_id, b_id, correct_a, correct_b)
            for a_id, b_id, correct_a, correct_b, labelled_at in _decided_pair_images(db_session, competition)
            if a_id in ranked_ids and b_id in ranked_ids
        ),
        key=lambda row: row[0],
    )
    cuts = np.unique(np.linspace(1, len(rows), min(len(rows), HISTORY_POINTS)).round().astype(int))
    return HistoryRead(
        competition_id=competition.id,
        classifier_names={classifier.id: classifier.name for classifier in classifiers},
        points=[_history_point(classifiers, rows[:cut], alpha) for cut in cuts],
    )


def _history_point(classifiers: list[Classifier], rows: list[tuple], alpha: float) -> HistoryPoint:
    """The Perron ranking of the classifiers registered by the last row's time, from these rows."""
    as_of: datetime = rows[-1][0]
    present = [classifier for classifier in classifiers if classifier.created_at <= as_of]
    index_of = {classifier.id: index for index, classifier in enumerate(present)}
    by_pair: dict[tuple[int, int], list[tuple[bool, bool]]] = {}
    for _, a_id, b_id, correct_a, correct_b in rows:
        if a_id in index_of and b_id in index_of:
            by_pair.setdefault((index_of[a_id], index_of[b_id]), []).append((correct_a, correct_b))
    outcomes = {pair: tuple(np.array(labels, dtype=bool).T) for pair, labels in by_pair.items()}
    counts = count_outcomes(outcomes, len(present))
    scores = perron_rank(dominance_matrix(pairwise_accuracy(counts, alpha))).scores
    return HistoryPoint(
        as_of=as_of,
        labelled_images=len(rows),
        classifier_ids=[classifier.id for classifier in present],
        mad_scores=scores.tolist(),
        mad_ranks=ranks_from_scores(scores).tolist(),
    )


# Pair galleries -------------------------------------------------------------------------------------------


def pair_gallery(*, db_session: Session, competition: Competition, a_id: int, b_id: int) -> PairGalleryRead:
    """A pair's selected and discarded images in selection order, both predictions and their outcomes.

    Only images with no open question are listed: a model's prediction on an image is public once every
    question on the image is decided, so annotators cannot learn which model asked what (an image shared
    with another pair would otherwise give the other pair's open question away). The counts of labelled
    and correct images cover every selected image whose two questions are decided, as the leaderboard does.
    """
    a_id, b_id = min(a_id, b_id), max(a_id, b_id)
    subset = db_session.scalar(
        select(PairSubset).where(
            PairSubset.competition_id == competition.id,
            PairSubset.classifier_a_id == a_id,
            PairSubset.classifier_b_id == b_id,
        )
    )
    if subset is None:
        raise NotFound(f"classifiers {a_id} and {b_id} have no selected images in this competition (yet)")
    question_a, question_b = aliased(Question), aliased(Question)
    rows = db_session.execute(
        select(
            PairImage, Image.sha256, question_a.outcome, question_b.outcome, _has_open_question(competition)
        )
        .join(PairSubset, PairSubset.id == PairImage.subset_id)
        .join(Image, Image.id == PairImage.image_id)
        .outerjoin(question_a, question_of_pair_image(question_a, PairImage.label_a))
        .outerjoin(question_b, question_of_pair_image(question_b, PairImage.label_b))
        .where(PairImage.subset_id == subset.id)
        .order_by(PairImage.position)
    ).all()
    names = competition.class_names
    images: dict[PairImageRole, list[GalleryImage]] = {role: [] for role in PairImageRole}
    labelled = withheld = reserve = correct_a = correct_b = 0
    for pair_image, sha256, right_a, right_b, still_open in rows:
        decided = right_a is not None and right_b is not None
        if pair_image.role == PairImageRole.selected and decided:
            labelled, correct_a, correct_b = labelled + 1, correct_a + right_a, correct_b + right_b
        if pair_image.role == PairImageRole.reserve:
            reserve += 1
            continue
        if still_open:
            withheld += pair_image.role == PairImageRole.selected
            continue
        images[pair_image.role].append(
            GalleryImage(
                position=pair_image.position,
                image_sha256=sha256,
                image_url=f"/images/{sha256}",
                thumbnail_url=f"/thumbnails/{sha256}",
                distance=pair_image.distance,
                label_a=str(names[pair_image.label_a]),
                label_b=str(names[pair_image.label_b]),
                prob_a=pair_image.prob_a,
                prob_b=pair_image.prob_b,
                correct_a=right_a,
                correct_b=right_b,
                case=3 - int(right_a) - int(right_b) if decided else None,
            )
        )
    classifier_a, classifier_b = db_session.get_one(Classifier, a_id), db_session.get_one(Classifier, b_id)
    return PairGalleryRead(
        competition_id=competition.id,
        classifier_a=ClassifierRef(id=classifier_a.id, name=classifier_a.name),
        classifier_b=ClassifierRef(id=classifier_b.id, name=classifier_b.name),
        selected=images[PairImageRole.selected],
        discarded=images[PairImageRole.discarded],
        withheld=withheld,
        reserve=reserve,
        labelled=labelled,
        correct_a=correct_a,
        correct_b=correct_b,
    )


def _has_open_question(competition: Competition):
    """The pair image's image has a question without an outcome (still asked, or open when discarded)."""
    return exists().where(
        Question.competition_id == competition.id,
        Question.image_id == PairImage.image_id,
        Question.outcome.is_(None),
    )


# Per-classifier analysis ----------------------------------------------------------------------------------


def classifier_analysis(
    *, db_session: Session, settings: Settings, competition: Competition, classifier: Classifier
) -> ClassifierAnalysisRead:
    """Worst classes and superclasses on MAD labels, most perplexing images, and stability versus k."""
    alpha = competition.smoothing
    pairs = ranked_pairs(db_session=db_session, competition=competition)
    judged = _own_predictions(db_session, competition, classifier)
    decided = [(label, correct) for _, _, label, _, correct in judged if correct is not None]
    predicted = np.array([label for label, _ in decided], dtype=np.int64)
    correct = np.array([right for _, right in decided], dtype=bool)
    taxonomy = competition_taxonomy(competition)
    hits, support = _class_tallies(predicted, correct, len(taxonomy.classes))
    nodes, membership = taxonomy.superclasses()
    membership = membership.astype(np.int64)
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
        worst_classes=_worst_groups(taxonomy.classes, taxonomy.names, hits, support, MIN_CLASS_SUPPORT),
        worst_superclasses=_worst_groups(
            nodes,
            [taxonomy.node_names[node] for node in nodes],
            membership @ hits,
            membership @ support,
            MIN_SUPERCLASS_SUPPORT,
        ),
        min_class_support=MIN_CLASS_SUPPORT,
        min_superclass_support=MIN_SUPERCLASS_SUPPORT,
        perplexing_images=_perplexing_images(db_session, settings, competition, pairs.classifiers, judged),
        stability=StabilityRead(
            k=competition.k if stability is None else stability.k,
            k_prime=[] if stability is None else stability.k_prime.tolist(),
            srcc=[] if stability is None else [_finite_or_none(float(value)) for value in stability.srcc],
        ),
    )


def _own_predictions(
    db_session: Session, competition: Competition, classifier: Classifier
) -> list[tuple[int, int, int, float, bool | None]]:
    """(image_id, ordinal, its label, its probability, outcome) on each image selected by one of its pairs
    with no open question left (see pair_gallery: predictions are public once an image is decided), each
    image once, in pair and selection order."""
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
            ~_has_open_question(competition),
        )
        .order_by(PairSubset.id, PairImage.position)
    ).all()
    seen: set[int] = set()
    own = []
    for image_id, ordinal, label_a, label_b, prob_a, prob_b, a_id, outcome in rows:
        if image_id in seen:
            continue
        seen.add(image_id)
        mine = a_id == classifier.id
        own.append((image_id, ordinal, label_a if mine else label_b, prob_a if mine else prob_b, outcome))
    return own


def _own_label(is_a):
    """The analysed classifier's label column of a pair image: label_a when it is the pair's a."""
    return case((is_a, PairImage.label_a), else_=PairImage.label_b)


def _class_tallies(
    predicted: np.ndarray, correct: np.ndarray, n_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per class: decided questions answered yes where it was predicted (hits), and all of them (support)."""
    return np.bincount(predicted[correct], minlength=n_classes), np.bincount(predicted, minlength=n_classes)


def _worst_groups(
    keys, names, hits: np.ndarray, support: np.ndarray, min_support: int
) -> list[GroupPrecisionRead]:
    """The lowest precisions hits/support with support ≥ min_support; ties: more support, then lower index
    (the order of the core's worst_class_precision and worst_superclass)."""
    candidates = np.flatnonzero(support >= max(min_support, 1))
    precision = hits[candidates] / support[candidates]
    order = np.lexsort((candidates, -support[candidates], precision))[:WORST_SHOWN]
    return [
        GroupPrecisionRead(
            key=str(keys[candidates[i]]),
            name=str(names[candidates[i]]),
            precision=float(precision[i]),
            support=int(support[candidates[i]]),
        )
        for i in order
    ]


def _perplexing_images(
    db_session: Session,
    settings: Settings,
    competition: Competition,
    classifiers: list[Classifier],
    own: list[tuple[int, int, int, float, bool | None]],
) -> list[PerplexityImage]:
    """The classifier's pair images with the highest C-perplexity over the ranked classifiers, with their
    X-perplexity on MAD labels (Example Perplexity, Sec. 2)."""
    if not own or not classifiers:
        return []
    image_ids = [image_id for image_id, _, _, _, _ in own]
    ordinals = np.array([ordinal for _, ordinal, _, _, _ in own], dtype=np.int64)
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
            image_sha256=sha256_of[own[i][0]],
            thumbnail_url=f"/thumbnails/{sha256_of[own[i][0]]}",
            c_perplexity=float(confusion[i]),
            x_perplexity=_finite_or_none(float(mistakes[i])),
            label=str(competition.class_names[own[i][2]]),
            prob=own[i][3],
            correct=own[i][4],
        )
        for i in most_confusing[:PERPLEXING_SHOWN]
    ]


def readable_predictions(settings: Settings, classifier: Classifier, n_images: int) -> Predictions:
    """A classifier's predictions, or none at all while a shard is missing in the middle (shards finish in
    any order while new images are being predicted)."""
    try:
        return read_predictions(settings=settings, classifier=classifier, n_images=n_images)
    except Conflict:
        return Predictions.empty(n_images)


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
    return {(image_id, class_index): outcome for image_id, class_index, outcome in rows}
