"""What labelling has established for the leaderboard: the labelled images of each pair.

A pair image is labelled when it is selected and both of its questions are decided: QUESTION_A asks
whether the image contains the pair's label_a (classifier a's prediction), QUESTION_B label_b. The
outcome of each is whether that classifier was right (paper Sec. 3.1).
"""

from collections.abc import Collection
from types import SimpleNamespace

import numpy as np
from sqlalchemy import Exists, Select, and_, exists, func, or_, select
from sqlalchemy.orm import Session, aliased

from app.competitions.models import Competition
from app.labelling import rules
from app.labelling.models import PairImage, PairImageRole, PairSubset, Question
from app.labelling.types import early_rule

QUESTION_A = aliased(Question, name="question_a")
QUESTION_B = aliased(Question, name="question_b")
PAIR_OUTCOMES = (
    PairSubset.classifier_a_id,
    PairSubset.classifier_b_id,
    QUESTION_A.outcome.label("correct_a"),
    QUESTION_B.outcome.label("correct_b"),
)
"""The columns (classifier_a_id, classifier_b_id, correct_a, correct_b) of a labelled pair image."""


def question_of_pair_image(question, label_column):
    """Join condition: the question (a Question or an alias of it) asking about a pair image's image and the
    given label column (PairImage.label_a or label_b)."""
    return and_(
        question.competition_id == PairSubset.competition_id,
        question.image_id == PairImage.image_id,
        question.class_index == label_column,
    )


def image_withheld(competition_id: int) -> Exists:
    """The pair image's image is not shown on public pages: it has a question without an outcome (still
    asked, or open when discarded), or a gold question (handed to every annotator who has not answered it,
    so listing it with its outcome would tell them it is gold, and its answer)."""
    return exists().where(
        Question.competition_id == competition_id,
        Question.image_id == PairImage.image_id,
        or_(Question.outcome.is_(None), Question.gold_answer.is_not(None)),
    )


def with_pair_questions(statement: Select, *, decided: bool) -> Select:
    """A statement over pair images joined to their subsets, joined to QUESTION_A and QUESTION_B: only the
    images whose two questions are both decided when `decided`, else every image (outer joins: a reserve
    image has no questions, an open one no outcome)."""
    on_a = question_of_pair_image(QUESTION_A, PairImage.label_a)
    on_b = question_of_pair_image(QUESTION_B, PairImage.label_b)
    if not decided:
        return statement.outerjoin(QUESTION_A, on_a).outerjoin(QUESTION_B, on_b)
    return (
        statement.join(QUESTION_A, on_a)
        .join(QUESTION_B, on_b)
        .where(QUESTION_A.outcome.is_not(None), QUESTION_B.outcome.is_not(None))
    )


def labelled_pair_images(competition_id: int, *columns) -> Select:
    """SELECT these columns for every labelled pair image of the competition (selected, both questions
    decided), in pair and selection order."""
    return (
        with_pair_questions(
            select(*columns).select_from(PairSubset).join(PairImage, PairImage.subset_id == PairSubset.id),
            decided=True,
        )
        .where(PairSubset.competition_id == competition_id, PairImage.role == PairImageRole.selected)
        .order_by(PairSubset.id, PairImage.position)
    )


def pair_outcomes(*, db_session: Session, competition: Competition) -> dict[tuple[int, int], np.ndarray]:
    """For every stored pair (a_id, b_id): an (n, 2) bool array (f_a correct, f_b correct) over its labelled
    images in selection order (outcome True: the image contains that class)."""
    outcomes: dict[tuple[int, int], list[tuple[bool, bool]]] = {
        (pair.classifier_a_id, pair.classifier_b_id): []
        for pair in db_session.execute(
            select(PairSubset.classifier_a_id, PairSubset.classifier_b_id)
            .where(PairSubset.competition_id == competition.id)
            .order_by(PairSubset.id)
        ).all()
    }
    rows = db_session.execute(labelled_pair_images(competition.id, *PAIR_OUTCOMES)).all()
    for row in rows:
        outcomes[(row.classifier_a_id, row.classifier_b_id)].append((row.correct_a, row.correct_b))
    return {pair: np.array(labelled, dtype=bool).reshape(-1, 2) for pair, labelled in outcomes.items()}


def annotators_to_first_label(
    *, db_session: Session, competition: Competition, pairs: Collection[tuple[int, int]]
) -> dict[tuple[int, int], int | None]:
    """For each of these pairs (a_id, b_id) without a labelled image whose selection is stored: how many
    more annotators must answer before its first image is labelled (the fewest over its selected images of
    rules.annotators_to_decide), or None when it has no image to ask about (its classifiers never disagree
    confidently). Pairs whose selection is not stored yet are left out."""
    if not pairs:
        return {}
    wanted = set(pairs)
    early = early_rule(competition)
    needed: dict[tuple[int, int], int | None] = {}
    votes_a, votes_b = (
        (
            question.yes_votes,
            question.no_votes,
            question.early_evidence,
            question.outcome,
            question.gold_answer,
        )
        for question in (QUESTION_A, QUESTION_B)
    )
    selected = and_(PairImage.subset_id == PairSubset.id, PairImage.role == PairImageRole.selected)
    rows = db_session.execute(
        with_pair_questions(
            select(
                PairSubset.classifier_a_id, PairSubset.classifier_b_id, PairImage.image_id, *votes_a, *votes_b
            )
            .select_from(PairSubset)
            .outerjoin(PairImage, selected),
            decided=False,
        ).where(PairSubset.competition_id == competition.id)
    ).all()
    for a_id, b_id, image_id, *counts in rows:
        if (a_id, b_id) not in wanted:
            continue
        known = needed.setdefault((a_id, b_id), None)
        if image_id is None:
            continue
        questions = [_vote_counts(*counts[:5]), _vote_counts(*counts[5:])]
        image_needs = rules.annotators_to_decide(questions, competition.panel_size, early)
        needed[(a_id, b_id)] = image_needs if known is None else min(known, image_needs)
    return needed


def _vote_counts(yes_votes, no_votes, early_evidence, outcome, gold_answer) -> SimpleNamespace:
    """A question's counts as rules reads them (no votes yet when the question is missing)."""
    return SimpleNamespace(
        yes_votes=yes_votes or 0,
        no_votes=no_votes or 0,
        early_evidence=0.0 if yes_votes is None else early_evidence,
        outcome=outcome,
        gold_answer=gold_answer,
    )


def open_question_counts(*, db_session: Session) -> dict[int, int]:
    """Questions without an outcome, per competition id (index ix_questions_open)."""
    rows = db_session.execute(
        select(Question.competition_id, func.count())
        .where(Question.outcome.is_(None))
        .group_by(Question.competition_id)
    )
    return {competition_id: count for competition_id, count in rows}
