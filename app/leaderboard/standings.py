"""The leaderboard: the MAD ranking of a competition from its labelled pair images.

Compared classifiers: those neither failed nor retired that have predictions (ready) or stored pair
selections, in registration order (Classifier.id), which is the row order of A, B and n. Pairs with a
retired or failed classifier are ignored; failed and not-yet-ready classifiers are listed as unranked. Of
the compared ones, those with a labelled image are ranked among themselves; one without any has null ranks
and scores and is listed as unranked too (docs/architecture.md, Ranking).
The labels of a pair are its selected images whose two questions are decided (labelling's
`pair_outcomes`); α is the competition's smoothing. The bootstrap is seeded, so the same votes always
give the same numbers, and the rankings of the latest counts are remembered per process (the 1000
resamples are most of a request's time; every admin poll and classifier page asks for them).
"""

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from babel.support import NullTranslations
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.classifiers.service import list_classifiers
from app.competitions.models import Competition
from app.core.analysis import case_shares, krcc, srcc
from app.core.ranking import (
    SCORE_DECIMALS,
    BootstrapIntervals,
    PairCounts,
    Ranking,
    count_outcomes,
    rank_classifiers,
    ranks_from_scores,
    scored_intervals,
)
from app.i18n import ENGLISH, N_, rebuilt_in_language
from app.jobs.schemas import PairSelectionRead
from app.jobs.selections import pair_selections
from app.labelling.results import annotators_to_first_label, pair_outcomes
from app.leaderboard.schemas import (
    BootstrapSettings,
    CaseSharesRead,
    ClassifierStanding,
    LeaderboardRead,
    MatricesRead,
    PairWithoutLabels,
    UnrankedClassifier,
)
from app.leaderboard.settling import active_provisional_rule, active_sampling

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_LEVEL = 0.95
BOOTSTRAP_SEED = 0
PROVISIONAL_RANK_SPREAD = 2
STABLE_K = 15
"""Paper Fig. 5: the ranking from each pair's first k images agrees with k = 30 (SRCC > 0.9) once k > 15."""
WAITING_FOR_PREDICTIONS = N_("waiting for its predictions")
NO_REASON_GIVEN = N_("no reason given")
UNRANKED_REASONS = (WAITING_FOR_PREDICTIONS, NO_REASON_GIVEN)
"""Why a classifier is not compared, as the API sends it in English (a failed one's own error aside)."""
PROVISIONAL_RULE_TEXT = N_(
    "A classifier is provisional while its {level} bootstrap rank interval spans more than {ranks} ranks, "
    "or while one of its pairs has fewer than min(k, {stable_k}) labelled images (paper Fig. 5: rankings "
    "settle once k > {stable_k}). One without any labelled image has no rank and no score yet; the others "
    "are ranked among themselves. Scores equal to {decimals} decimals share a rank."
)
"""The provisional rule before translation (pages show it in the reader's language: app.i18n.in_language)."""
PROVISIONAL_RULE = PROVISIONAL_RULE_TEXT.format(
    level=f"{BOOTSTRAP_LEVEL:.0%}",
    ranks=PROVISIONAL_RANK_SPREAD + 1,
    stable_k=STABLE_K,
    decimals=SCORE_DECIMALS,
)
RANKINGS_REMEMBERED = 64


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
            unranked.append(_unranked(classifier, classifier.error or NO_REASON_GIVEN))
        elif classifier.status == ClassifierStatus.ready or classifier.id in with_subset:
            ranked.append(classifier)
        else:
            unranked.append(_unranked(classifier, WAITING_FOR_PREDICTIONS))
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


def finite_or_none(value: float) -> float | None:
    """NaN (an undefined correlation, a missing score) as None."""
    return None if math.isnan(value) else float(value)


def rank_or_none(value: float) -> int | None:
    """A rank of `Ranking.ranks_of` (NaN: no rank) as an int or None."""
    return None if math.isnan(value) else int(value)


def compute_leaderboard(*, db_session: Session, competition: Competition) -> LeaderboardRead:
    """Perron rank with bootstrap intervals, HodgeRank / Bradley–Terry / win rate, Table 1, A, B and n."""
    alpha = competition.smoothing
    pairs = ranked_pairs(db_session=db_session, competition=competition)
    classifiers, m = pairs.classifiers, len(pairs.classifiers)
    counts = count_outcomes(pairs.outcomes, m)
    ranked_ids = {classifier.id for classifier in classifiers}
    selections = [
        selection
        for selection in pair_selections(db_session=db_session, competition=competition)
        if {selection.classifier_a_id, selection.classifier_b_id} <= ranked_ids
    ]
    no_rank = {
        i: _no_rank(classifier.id, m, selections)
        for i, classifier in enumerate(classifiers)
        if counts.without_evidence[i]
    }
    shares = case_shares(counts)
    active = active_sampling(db_session, competition)
    common = dict(
        competition_id=competition.id,
        competition_name=competition.name,
        smoothing=alpha,
        bootstrap=BootstrapSettings(
            n_resamples=BOOTSTRAP_RESAMPLES, level=BOOTSTRAP_LEVEL, seed=BOOTSTRAP_SEED
        ),
        provisional_rule=(
            PROVISIONAL_RULE
            if active is None
            else active_provisional_rule(BOOTSTRAP_LEVEL, PROVISIONAL_RANK_SPREAD)
        ),
        active=active,
        panel_size=competition.panel_size,
        pairs_without_labels=_pairs_without_labels(db_session, competition, classifiers, counts),
        short_pairs=[selection for selection in selections if selection.selected < selection.k],
        unranked=sorted(
            [*pairs.unranked, *(_unranked(classifiers[i], reason) for i, reason in no_rank.items())],
            key=lambda entry: entry.classifier_id,
        ),
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
    comparison = _accuracy_comparison(classifiers, ranking.perron.scores, ranking.scored)
    off_diagonal = ~np.eye(m, dtype=bool)
    fewest = np.where(off_diagonal, counts.n, np.iinfo(np.int64).max).min(axis=1) if m > 1 else np.zeros(1)
    settled_with = min(competition.k, STABLE_K)
    rows = _StandingRows(ranking, intervals, comparison)
    standings = [
        rows.standing(
            i,
            classifier,
            no_rank=no_rank.get(i),
            fewest_labelled=int(fewest[i]),
            labelled_images=int(counts.n[i].sum()),
            unsettled=int(fewest[i]) < settled_with if active is None else not active.settled,
        )
        for i, classifier in enumerate(classifiers)
    ]
    return LeaderboardRead(
        **common,
        classifiers=standings,
        lambda_max=finite_or_none(ranking.perron.lambda_max),
        consistency_index=finite_or_none(ranking.perron.consistency_index),
        srcc=comparison.srcc,
        krcc=comparison.krcc,
        correlated_classifiers=len(comparison.ranks),
        matrices=MatricesRead(
            classifier_ids=[classifier.id for classifier in classifiers],
            accuracy=[[finite_or_none(value) for value in row] for row in ranking.accuracy],
            dominance=[[finite_or_none(value) for value in row] for row in ranking.dominance],
            labelled=counts.n.tolist(),
            **_selected_matrices([classifier.id for classifier in classifiers], selections),
        ),
    )


def _selected_matrices(ids: list[int], selections: list[PairSelectionRead]) -> dict[str, list[list[int]]]:
    """Per pair (i, j), symmetric in ids order: its selected images and those of them below T."""
    index = {id_: i for i, id_ in enumerate(ids)}
    selected, below = (
        np.zeros((len(ids), len(ids)), dtype=np.int64),
        np.zeros((len(ids), len(ids)), dtype=np.int64),
    )
    for pair in selections:
        i, j = index[pair.classifier_a_id], index[pair.classifier_b_id]
        selected[i, j] = selected[j, i] = pair.selected
        below[i, j] = below[j, i] = pair.below_threshold
    return {"selected": selected.tolist(), "below_threshold": below.tolist()}


def by_rank(board: LeaderboardRead) -> list[ClassifierStanding]:
    """The standings in the order of a ranking table: by MAD rank, those without one last, ties in
    registration order."""
    return sorted(
        board.classifiers,
        key=lambda standing: (standing.mad_rank is None, standing.mad_rank or 0, standing.classifier_id),
    )


def _no_rank(classifier_id: int, m: int, selections: list[PairSelectionRead]) -> str:
    """Why a classifier without any labelled image has no rank, in English: what each of its m − 1 pairs
    waits for."""
    own = [s for s in selections if classifier_id in (s.classifier_a_id, s.classifier_b_id)]
    empty = sum(not selection.selected for selection in own)
    return no_rank_text(m, empty, len(own) - empty, ENGLISH)


def no_rank_text(m: int, empty: int, waiting: int, words: NullTranslations) -> str:
    """Why a classifier without any labelled image has no rank, in the language of `words`: of its m − 1
    pairs, `empty` selected no image, `waiting` wait for votes and the others are not selected yet."""
    pairs = m - 1
    if pairs == 0:
        return words.gettext("no other classifier to compare it with")
    if empty == pairs:
        return words.ngettext(
            "its one pair selected no image to label",
            "all {count} of its pairs selected no image to label",
            pairs,
        ).format(count=pairs)
    unselected = pairs - empty - waiting
    shown = []
    if empty:
        shown.append(
            words.ngettext("{count} selected no image", "{count} selected no image", empty).format(
                count=empty
            )
        )
    if waiting:
        shown.append(
            words.ngettext("{count} waits for votes", "{count} wait for votes", waiting).format(count=waiting)
        )
    if unselected:
        shown.append(
            words.ngettext("{count} is not selected yet", "{count} are not selected yet", unselected).format(
                count=unselected
            )
        )
    return words.ngettext(
        "no labelled image yet: of its {count} pair, {waiting}",
        "no labelled image yet: of its {count} pairs, {waiting}",
        pairs,
    ).format(count=pairs, waiting=", ".join(shown))


def no_rank_in_language(
    board: LeaderboardRead, standing: ClassifierStanding, words: NullTranslations
) -> str | None:
    """A standing's no_rank, sent in English, in the language of `words`: built again from the board's pairs
    (its empty short pairs, its pairs without labels whose selection is stored), or as sent when they no
    longer give it (app.i18n.rebuilt_in_language)."""
    if standing.no_rank is None:
        return None
    own = standing.classifier_id
    empty = {
        (p.classifier_a_id, p.classifier_b_id)
        for p in board.short_pairs
        if own in (p.classifier_a_id, p.classifier_b_id) and not p.selected
    }
    waiting = sum(
        p.selected
        and own in (p.classifier_a_id, p.classifier_b_id)
        and (p.classifier_a_id, p.classifier_b_id) not in empty
        for p in board.pairs_without_labels
    )
    m = len(board.matrices.classifier_ids)
    return rebuilt_in_language(
        standing.no_rank, lambda catalogue: no_rank_text(m, len(empty), waiting, catalogue), words
    )


def _pairs_without_labels(
    db_session: Session, competition: Competition, classifiers: list[Classifier], counts: PairCounts
) -> list[PairWithoutLabels]:
    """The pairs of ranked classifiers with no labelled image, with the annotators each waits for."""
    empty = [
        (classifiers[i].id, classifiers[j].id)
        for i, j in zip(*np.triu_indices(counts.m, k=1), strict=True)
        if counts.n[i, j] == 0
    ]
    needed = annotators_to_first_label(db_session=db_session, competition=competition, pairs=empty)
    return [
        PairWithoutLabels(
            classifier_a_id=a,
            classifier_b_id=b,
            selected=(a, b) in needed,
            annotators_needed=needed.get((a, b)),
        )
        for a, b in empty
    ]


def rank_with_intervals(counts: PairCounts, alpha: float) -> tuple[Ranking, BootstrapIntervals]:
    """rank_classifiers and the seeded scored_intervals of the counts, remembered per process. Both are
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
    intervals = scored_intervals(
        counts, alpha, n_resamples=BOOTSTRAP_RESAMPLES, level=BOOTSTRAP_LEVEL, seed=BOOTSTRAP_SEED
    )
    return rank_classifiers(counts, alpha), intervals


@dataclass(frozen=True)
class AccuracyComparison:
    """Table 1: {index: (accuracy rank, MAD rank)} among classifiers reporting an accuracy; SRCC, KRCC."""

    ranks: dict[int, tuple[int, int]]
    srcc: float | None
    krcc: float | None


def _accuracy_comparison(
    classifiers: list[Classifier], mad_scores: np.ndarray, scored: np.ndarray
) -> AccuracyComparison:
    """Accuracy rank and MAD rank over the classifiers that report an accuracy and have labelled images
    (`scored`: a classifier without labels has no MAD rank to compare), and their correlations."""
    accuracies = {
        i: classifier.reported_accuracy
        for i, classifier in enumerate(classifiers)
        if classifier.reported_accuracy is not None and scored[i]
    }
    if not accuracies:
        return AccuracyComparison({}, None, None)
    reporting = list(accuracies)
    accuracy_ranks = ranks_from_scores(list(accuracies.values()))
    mad_ranks = ranks_from_scores(mad_scores[reporting])
    ranks = {
        i: (int(accuracy_rank), int(mad_rank))
        for i, accuracy_rank, mad_rank in zip(reporting, accuracy_ranks, mad_ranks, strict=True)
    }
    if len(reporting) < 2:
        return AccuracyComparison(ranks, None, None)
    return AccuracyComparison(
        ranks,
        finite_or_none(srcc(mad_ranks, accuracy_ranks)),
        finite_or_none(krcc(mad_ranks, accuracy_ranks)),
    )


class _StandingRows:
    """The standings of one ranking: every rank and score of classifier i, None where it has none."""

    def __init__(self, ranking: Ranking, intervals: BootstrapIntervals, comparison: AccuracyComparison):
        self.ranking, self.intervals, self.comparison = ranking, intervals, comparison
        self.mad_ranks = ranking.ranks
        self.hodge_ranks = ranking.ranks_of(ranking.hodge)
        self.bradley_terry_ranks = ranking.ranks_of(ranking.bradley_terry)
        self.win_rate_ranks = ranking.ranks_of(ranking.win_rate)

    def standing(
        self,
        i: int,
        classifier: Classifier,
        *,
        no_rank: str | None,
        fewest_labelled: int,
        labelled_images: int,
        unsettled: bool,
    ) -> ClassifierStanding:
        """Classifier i's standing; provisional while unranked, its interval is wide or it is `unsettled`."""
        ranking, intervals = self.ranking, self.intervals
        reported = self.comparison.ranks.get(i)
        spread = intervals.rank_high[i] - intervals.rank_low[i]
        return ClassifierStanding(
            classifier_id=classifier.id,
            name=classifier.name,
            status=classifier.status,
            mad_score=finite_or_none(ranking.perron.scores[i]),
            mad_rank=rank_or_none(self.mad_ranks[i]),
            score_low=finite_or_none(intervals.score_low[i]),
            score_high=finite_or_none(intervals.score_high[i]),
            rank_low=rank_or_none(intervals.rank_low[i]),
            rank_high=rank_or_none(intervals.rank_high[i]),
            provisional=no_rank is not None or bool(spread > PROVISIONAL_RANK_SPREAD) or unsettled,
            no_rank=no_rank,
            hodge_score=finite_or_none(ranking.hodge[i]),
            hodge_rank=rank_or_none(self.hodge_ranks[i]),
            bradley_terry_score=finite_or_none(ranking.bradley_terry[i]),
            bradley_terry_rank=rank_or_none(self.bradley_terry_ranks[i]),
            win_rate=finite_or_none(ranking.win_rate[i]),
            win_rate_rank=rank_or_none(self.win_rate_ranks[i]),
            labelled_images=labelled_images,
            fewest_labelled_in_a_pair=fewest_labelled,
            reported_accuracy=classifier.reported_accuracy,
            accuracy_rank=None if reported is None else reported[0],
            mad_rank_among_reported=None if reported is None else reported[1],
            delta_rank=None if reported is None else reported[0] - reported[1],
        )
