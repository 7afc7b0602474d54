"""The ranking's history: Perron ranks as today's labels accumulated."""

from datetime import datetime
from typing import NamedTuple

import numpy as np
from sqlalchemy.orm import Session

from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.core.ranking import count_outcomes, ranks_of_known, scored_perron
from app.labelling.models import PairSubset
from app.labelling.results import PAIR_OUTCOMES, QUESTION_A, QUESTION_B, labelled_pair_images
from app.leaderboard.schemas import HistoryPoint, HistoryRead
from app.leaderboard.standings import finite_or_none, rank_or_none, ranked_pairs

HISTORY_POINTS = 24


class Labelled(NamedTuple):
    """A selected pair image whose two questions are decided: when, its pair, and who was right."""

    labelled_at: datetime
    a_id: int
    b_id: int
    correct_a: bool
    correct_b: bool


def _decided_pair_images(db_session: Session, competition: Competition) -> list[Labelled]:
    """Every selected pair image whose two questions are decided; labelled_at is when the later of its two
    questions was decided, or when the pair was selected if that came later (a new classifier's pair reuses
    answers given before it existed)."""
    rows = db_session.execute(
        labelled_pair_images(
            competition.id,
            *PAIR_OUTCOMES,
            QUESTION_A.decided_at.label("decided_a"),
            QUESTION_B.decided_at.label("decided_b"),
            PairSubset.created_at,
        )
    ).all()
    return [
        Labelled(
            max(row.decided_a, row.decided_b, row.created_at),
            row.classifier_a_id,
            row.classifier_b_id,
            row.correct_a,
            row.correct_b,
        )
        for row in rows
    ]


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
            row
            for row in _decided_pair_images(db_session, competition)
            if row.a_id in ranked_ids and row.b_id in ranked_ids
        ),
        key=lambda row: row.labelled_at,
    )
    cuts = np.unique(np.linspace(1, len(rows), min(len(rows), HISTORY_POINTS)).round().astype(int))
    return HistoryRead(
        competition_id=competition.id,
        classifier_names={classifier.id: classifier.name for classifier in classifiers},
        points=[_history_point(classifiers, rows[:cut], alpha) for cut in cuts],
    )


def _history_point(classifiers: list[Classifier], rows: list[Labelled], alpha: float) -> HistoryPoint:
    """The Perron ranking of the classifiers registered by the last row's time, from these rows (those
    without a labelled image yet have none, as on the leaderboard)."""
    as_of = rows[-1].labelled_at
    present = [classifier for classifier in classifiers if classifier.created_at <= as_of]
    index_of = {classifier.id: index for index, classifier in enumerate(present)}
    by_pair: dict[tuple[int, int], list[tuple[bool, bool]]] = {}
    for row in rows:
        if row.a_id in index_of and row.b_id in index_of:
            by_pair.setdefault((index_of[row.a_id], index_of[row.b_id]), []).append(
                (row.correct_a, row.correct_b)
            )
    outcomes = {pair: tuple(np.array(labels, dtype=bool).T) for pair, labels in by_pair.items()}
    counts = count_outcomes(outcomes, len(present))
    scores = scored_perron(counts, alpha).scores
    return HistoryPoint(
        as_of=as_of,
        labelled_images=len(rows),
        classifier_ids=[classifier.id for classifier in present],
        mad_scores=[finite_or_none(score) for score in scores],
        mad_ranks=[rank_or_none(rank) for rank in ranks_of_known(scores)],
    )
