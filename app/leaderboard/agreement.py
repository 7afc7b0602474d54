"""Agreement and reliability of a competition's votes (app.core.agreement) and the MAD ranking recomputed
from Dawid–Skene labels beside the majority ranking, so a lab can see whether label noise moves its result.

The votes are the counted ones (annotators whose votes are excluded left out) on questions that are not gold
(their answers are known, and measure annotators elsewhere). A gold question on a pair image keeps its known
answer in both rankings.
"""

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.core.agreement import (
    DawidSkene,
    Votes,
    alpha_against_others,
    dawid_skene,
    nominal_alpha,
    reliability_matrix,
)
from app.core.analysis import srcc
from app.core.ranking import count_outcomes, rank_classifiers
from app.labelling.models import Question, Vote
from app.labelling.results import PAIR_OUTCOMES, QUESTION_A, QUESTION_B, labelled_pair_images
from app.leaderboard.schemas import AnnotatorReliabilityRead, QualityRead, RankingComparisonRead
from app.leaderboard.standings import finite_or_none, rank_or_none, ranked_pairs
from app.users.models import User

MIN_ANSWERS_TO_AGREE = 2
"""Answers a question needs before it says anything about agreement: one answer agrees with nothing."""


def competition_quality(*, db_session: Session, competition: Competition) -> QualityRead:
    """Krippendorff's α over the questions and per annotator, Dawid–Skene reliabilities, and the MAD ranking
    from majority outcomes beside the one from Dawid–Skene labels with the SRCC between them.

    Agreement is measured only where two or more annotators answered a question (`shared` questions): one
    answer agrees with nothing, and Dawid–Skene fitted to lone answers estimates nothing but its own start.
    Without a shared question every figure is missing and `needs_more` says why; an annotator with no answer
    on one has no estimates.
    """
    rows = db_session.execute(
        select(Vote.question_id, Vote.user_id, Vote.answer, Question.outcome, User.username)
        .join(Question, Question.id == Vote.question_id)
        .join(User, User.id == Vote.user_id)
        .where(
            Question.competition_id == competition.id, Question.gold_answer.is_(None), ~User.votes_excluded
        )
        .order_by(Vote.question_id, Vote.user_id)
    ).all()
    answers_to = Counter(row.question_id for row in rows)
    shared_rows = [row for row in rows if answers_to[row.question_id] >= MIN_ANSWERS_TO_AGREE]
    users = dict(sorted({(row.user_id, row.username) for row in rows}))
    answers, shared_answers = (
        Counter(row.user_id for row in rows),
        Counter(row.user_id for row in shared_rows),
    )
    counts = {"competition_id": competition.id, "questions": len(answers_to), "votes": len(rows)}
    if not shared_rows:
        return QualityRead(
            **counts,
            questions_shared=0,
            needs_more=_needs_more(len(answers_to)),
            annotators=[
                AnnotatorReliabilityRead(
                    user_id=user_id, username=name, answers=answers[user_id], shared_answers=0
                )
                for user_id, name in users.items()
            ],
        )
    estimates = _estimates(shared_rows, list(users))
    outcome_of = {row.question_id: row.outcome for row in shared_rows}
    rankings, correlation = _rankings(db_session, competition, estimates.label_of)
    return QualityRead(
        **counts,
        questions_shared=len(outcome_of),
        alpha=estimates.alpha,
        dawid_skene_prior_yes=estimates.dawid_skene.prior_yes,
        dawid_skene_iterations=estimates.dawid_skene.iterations,
        labels_changed=sum(
            outcome is not None and outcome != estimates.label_of[question_id]
            for question_id, outcome in outcome_of.items()
        ),
        annotators=[
            _reliability(user_id, name, answers[user_id], shared_answers[user_id], estimates)
            for user_id, name in users.items()
        ],
        rankings=rankings,
        srcc_majority_vs_dawid_skene=correlation,
    )


def _needs_more(questions: int) -> str:
    """Why a competition's agreement is not measured yet: no question has two counted answers."""
    return "Agreement needs at least two annotators per question: " + (
        "there are no counted answers yet."
        if questions == 0
        else f"each of the {questions} question{'' if questions == 1 else 's'} answered so far has one "
        "counted answer."
    )


@dataclass(frozen=True)
class _Estimates:
    """α and Dawid–Skene over the shared questions, indexed by annotator as `user_ids`."""

    user_ids: list[int]
    alpha: float | None
    alphas: np.ndarray
    dawid_skene: DawidSkene
    label_of: dict[int, bool]


def _estimates(shared_rows: list, user_ids: list[int]) -> _Estimates:
    """Krippendorff's α (overall and per annotator against the others) and Dawid–Skene by EM, over the
    votes on questions with two or more answers."""
    question_ids = sorted({row.question_id for row in shared_rows})
    question_index = {question_id: index for index, question_id in enumerate(question_ids)}
    user_index = {user_id: index for index, user_id in enumerate(user_ids)}
    votes = Votes(
        np.array([question_index[row.question_id] for row in shared_rows], dtype=np.int64),
        np.array([user_index[row.user_id] for row in shared_rows], dtype=np.int64),
        np.array([row.answer for row in shared_rows], dtype=bool),
        len(question_ids),
        len(user_ids),
    )
    estimate = dawid_skene(votes)
    return _Estimates(
        user_ids,
        finite_or_none(nominal_alpha(reliability_matrix(votes))),
        alpha_against_others(votes),
        estimate,
        {question_id: bool(estimate.labels[index]) for question_id, index in question_index.items()},
    )


def _reliability(
    user_id: int, username: str, answers: int, shared: int, estimates: _Estimates
) -> AnnotatorReliabilityRead:
    """One annotator's row: their estimates, or none without an answer on a shared question."""
    if shared == 0:
        return AnnotatorReliabilityRead(user_id=user_id, username=username, answers=answers, shared_answers=0)
    index = estimates.user_ids.index(user_id)
    estimate = estimates.dawid_skene
    return AnnotatorReliabilityRead(
        user_id=user_id,
        username=username,
        answers=answers,
        shared_answers=shared,
        alpha_against_others=finite_or_none(float(estimates.alphas[index])),
        dawid_skene_accuracy=float(estimate.accuracy[index]),
        dawid_skene_sensitivity=float(estimate.sensitivity[index]),
        dawid_skene_specificity=float(estimate.specificity[index]),
    )


def _rankings(
    db_session: Session, competition: Competition, label_of: dict[int, bool]
) -> tuple[list[RankingComparisonRead], float | None]:
    """The Perron ranking of the ranked classifiers from majority outcomes and from Dawid–Skene labels (a
    question without counted votes keeps its outcome), and the SRCC of their scores."""
    classifiers = ranked_pairs(db_session=db_session, competition=competition).classifiers
    index_of = {classifier.id: index for index, classifier in enumerate(classifiers)}
    majority: dict[tuple[int, int], list[tuple[bool, bool]]] = {}
    relabelled: dict[tuple[int, int], list[tuple[bool, bool]]] = {}
    pair_questions = labelled_pair_images(
        competition.id, *PAIR_OUTCOMES, QUESTION_A.id.label("question_a"), QUESTION_B.id.label("question_b")
    )
    for row in db_session.execute(pair_questions):
        if row.classifier_a_id in index_of and row.classifier_b_id in index_of:
            pair = (index_of[row.classifier_a_id], index_of[row.classifier_b_id])
            majority.setdefault(pair, []).append((row.correct_a, row.correct_b))
            labels = (
                label_of.get(row.question_a, row.correct_a),
                label_of.get(row.question_b, row.correct_b),
            )
            relabelled.setdefault(pair, []).append(labels)
    if not classifiers:
        return [], None
    by_majority, by_dawid_skene = (
        rank_classifiers(count_outcomes(_as_arrays(outcomes), len(classifiers)), competition.smoothing)
        for outcomes in (majority, relabelled)
    )
    evidence = by_majority.scored
    correlation = (
        srcc(by_majority.perron.scores[evidence], by_dawid_skene.perron.scores[evidence])
        if evidence.sum() >= 2
        else math.nan
    )
    majority_ranks, dawid_skene_ranks = by_majority.ranks, by_dawid_skene.ranks
    return [
        RankingComparisonRead(
            classifier_id=classifier.id,
            name=classifier.name,
            majority_rank=rank_or_none(majority_ranks[index]),
            dawid_skene_rank=rank_or_none(dawid_skene_ranks[index]),
            majority_score=finite_or_none(by_majority.perron.scores[index]),
            dawid_skene_score=finite_or_none(by_dawid_skene.perron.scores[index]),
        )
        for index, classifier in enumerate(classifiers)
    ], None if math.isnan(correlation) else correlation


def _as_arrays(outcomes: dict[tuple[int, int], list[tuple[bool, bool]]]) -> dict:
    """Per pair: the two aligned boolean arrays count_outcomes takes."""
    return {
        pair: (np.array([a for a, _ in labels], dtype=bool), np.array([b for _, b in labels], dtype=bool))
        for pair, labels in outcomes.items()
    }
