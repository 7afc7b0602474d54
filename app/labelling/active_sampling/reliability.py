"""Each annotator's reliability under active sampling (issue 33; docs/architecture.md, Active sampling): the
tallies it rests on, kept as questions are decided, and the estimates the policy writes at each refresh.

The tallies grow by the questions decided since the last refresh only (`tally_decided`: every decision leaves
an UntalliedDecision row in its own transaction, which the tally takes as it counts it, so that none is missed
or counted twice whatever order the transactions commit in), so a refresh costs what was decided since,
however large the competition: for each such regular question, the pairs among its votes that no stopping rule
chose (app.core.reliability.unbiased_votes: the first two, or the first strict majority's worth when its first
two voters were not both vetted, which the votes' stored weights tell), and whether its outcome is "yes" (the
base rate). Votes of annotators whose votes are excluded are left out. A
question decided again after an undo reopened it is tallied again.
"""

from dataclasses import dataclass
from itertools import combinations

import numpy as np
from sqlalchemy import case, delete, func, select
from sqlalchemy.orm import Session

from app.core.reliability import (
    CrowdEvidence,
    annotator_reliability,
    unbiased_votes,
    vote_weight,
)
from app.db.statements import conflict_insert
from app.labelling.models import (
    AnnotatorAgreement,
    AnnotatorReliability,
    GoldAnswer,
    Question,
    UntalliedDecision,
    Vote,
)
from app.users.models import User


@dataclass(frozen=True)
class Tally:
    """Regular questions tallied, and how many of them are "yes"."""

    decided: int
    decided_yes: int


TALLY_CHUNK = 5000
"""Questions whose votes one statement of tally_decided reads (SQLite binds at most 32,766 values)."""


def tally_decided(db_session: Session, competition_id: int, panel_size: int) -> Tally:
    """Add the unbiased vote pairs of the regular questions decided since the last tally to the competition's
    AnnotatorAgreement rows (module docstring), taking their UntalliedDecision rows; the decided counts."""
    taken = delete(UntalliedDecision).where(UntalliedDecision.competition_id == competition_id)
    question_ids = sorted(set(db_session.scalars(taken.returning(UntalliedDecision.question_id))))
    pairs: dict[tuple[int, int], list[int]] = {}
    decided = decided_yes = 0
    for start in range(0, len(question_ids), TALLY_CHUNK):
        outcomes = _add_pairs(db_session, question_ids[start : start + TALLY_CHUNK], panel_size, pairs)
        decided, decided_yes = decided + len(outcomes), decided_yes + sum(outcomes)
    _add_agreements(db_session, competition_id, pairs)
    return Tally(decided, decided_yes)


def _add_pairs(
    db_session: Session, question_ids: list[int], panel_size: int, pairs: dict[tuple[int, int], list[int]]
) -> list[bool]:
    """Count into `pairs` ([questions, agreeing] per (user_a, user_b)) the unbiased vote pairs of those of
    these questions that are decided and regular; their outcomes."""
    outcome_of = dict(
        db_session.execute(
            select(Question.id, Question.outcome).where(
                Question.id.in_(question_ids), Question.gold_answer.is_(None), Question.outcome.is_not(None)
            )
        ).all()
    )
    votes = db_session.execute(
        select(Vote.question_id, Vote.user_id, Vote.answer, Vote.weight)
        .join(User, User.id == Vote.user_id)
        .where(Vote.question_id.in_(list(outcome_of)), ~User.votes_excluded)
        .order_by(Vote.question_id, Vote.created_at, Vote.id)
    ).all()
    by_question: dict[int, list] = {}
    for vote in votes:
        by_question.setdefault(vote.question_id, []).append(vote)
    for cast in by_question.values():
        eligible = len(cast) >= 2 and cast[0].weight is not None and cast[1].weight is not None
        for first, second in combinations(cast[: unbiased_votes(panel_size, eligible, len(cast))], 2):
            key = (min(first.user_id, second.user_id), max(first.user_id, second.user_id))
            tally = pairs.setdefault(key, [0, 0])
            tally[0] += 1
            tally[1] += first.answer == second.answer
    return [bool(outcome) for outcome in outcome_of.values()]


def _add_agreements(
    db_session: Session, competition_id: int, pairs: dict[tuple[int, int], list[int]]
) -> None:
    """Upsert the new pair tallies onto the competition's AnnotatorAgreement rows."""
    if not pairs:
        return
    insert = conflict_insert(db_session, AnnotatorAgreement)
    db_session.execute(
        insert.on_conflict_do_update(
            index_elements=[
                AnnotatorAgreement.competition_id,
                AnnotatorAgreement.user_a_id,
                AnnotatorAgreement.user_b_id,
            ],
            set_={
                "questions": AnnotatorAgreement.questions + insert.excluded.questions,
                "agreeing": AnnotatorAgreement.agreeing + insert.excluded.agreeing,
            },
        ),
        [
            {
                "competition_id": competition_id,
                "user_a_id": a,
                "user_b_id": b,
                "questions": total,
                "agreeing": agreeing,
            }
            for (a, b), (total, agreeing) in sorted(pairs.items())
        ],
    )


def refit(db_session: Session, competition_id: int) -> int:
    """Fit every annotator's reliability (app.core.reliability) to the agreements and first gold answers
    of annotators whose votes are not excluded, and store it (AnnotatorReliability, replacing the last);
    the number of annotators vetted."""
    agreements = db_session.execute(
        select(
            AnnotatorAgreement.user_a_id,
            AnnotatorAgreement.user_b_id,
            AnnotatorAgreement.questions,
            AnnotatorAgreement.agreeing,
        ).where(AnnotatorAgreement.competition_id == competition_id)
    ).all()
    right = func.sum(case((GoldAnswer.answer == Question.gold_answer, 1), else_=0))
    gold = db_session.execute(
        select(GoldAnswer.user_id, func.count().label("answered"), right.label("right"))
        .join(Question, Question.id == GoldAnswer.question_id)
        .where(Question.competition_id == competition_id)
        .group_by(GoldAnswer.user_id)
    ).all()
    excluded = set(db_session.scalars(select(User.id).where(User.votes_excluded)))
    users = sorted(
        (
            {row.user_a_id for row in agreements}
            | {row.user_b_id for row in agreements}
            | {g.user_id for g in gold}
        )
        - excluded
    )
    db_session.execute(
        delete(AnnotatorReliability).where(AnnotatorReliability.competition_id == competition_id)
    )
    if not users:
        return 0
    index = {user_id: position for position, user_id in enumerate(users)}
    kept = [row for row in agreements if row.user_a_id in index and row.user_b_id in index]
    gold_answered = np.zeros(len(users), dtype=np.int64)
    gold_right = np.zeros(len(users), dtype=np.int64)
    for row in gold:
        if row.user_id in index:
            gold_answered[index[row.user_id]] = row.answered
            gold_right[index[row.user_id]] = int(row.right or 0)
    evidence = CrowdEvidence(
        gold_right,
        gold_answered,
        np.array([index[row.user_a_id] for row in kept], dtype=np.int64),
        np.array([index[row.user_b_id] for row in kept], dtype=np.int64),
        np.array([row.questions for row in kept], dtype=np.int64),
        np.array([row.agreeing for row in kept], dtype=np.int64),
    )
    reliability = annotator_reliability(evidence)
    weights = vote_weight(reliability)
    colluding = np.zeros(len(users), dtype=bool)
    colluding[evidence.pair_a[reliability.colluding]] = True
    colluding[evidence.pair_b[reliability.colluding]] = True
    db_session.add_all(
        AnnotatorReliability(
            competition_id=competition_id,
            user_id=user_id,
            accuracy=float(reliability.accuracy[at]),
            evidence=float(reliability.evidence[at]),
            vetted=bool(reliability.vetted[at]),
            weight=None if np.isnan(weights[at]) else float(weights[at]),
            colluding=bool(colluding[at]),
            gold_answered=int(gold_answered[at]),
            gold_right=int(gold_right[at]),
        )
        for at, user_id in enumerate(users)
    )
    return int(reliability.vetted.sum())


NOTHING_VETS = (
    "no gold questions: only agreement between annotators vets them, so two accounts of one person are "
    "caught only once they have voted together often enough; add gold questions (they are mixed in at 2% "
    "under active sampling when the competition sets no gold rate)"
)
"""The warning shown where early decisions rest on agreement alone."""
NONE_VETTED = "no annotator is vetted yet: every question goes to a strict majority of the panel"


@dataclass(frozen=True)
class EarlyDecisionBasis:
    """What early decisions rely on at the last refresh: annotators estimated, vetted and found colluding,
    gold answers counted, questions decided with fewer votes than a strict majority, and a warning."""

    annotators: int
    vetted: int
    colluding: int
    gold_answers: int
    decided_early: int
    warning: str | None


def early_decision_basis(db_session: Session, competition_id: int, panel_size: int) -> EarlyDecisionBasis:
    """The EarlyDecisionBasis of a competition, from its AnnotatorReliability rows and decided questions."""
    annotators, vetted, colluding, gold_answers = db_session.execute(
        select(
            func.count(),
            func.coalesce(func.sum(case((AnnotatorReliability.vetted, 1), else_=0)), 0),
            func.coalesce(func.sum(case((AnnotatorReliability.colluding, 1), else_=0)), 0),
            func.coalesce(func.sum(AnnotatorReliability.gold_answered), 0),
        ).where(AnnotatorReliability.competition_id == competition_id)
    ).one()
    decided_early = db_session.scalar(
        select(func.count()).where(
            Question.competition_id == competition_id,
            Question.gold_answer.is_(None),
            ~Question.adjudicated,
            Question.outcome.is_not(None),
            Question.yes_votes + Question.no_votes < panel_size // 2 + 1,
        )
    )
    has_gold = db_session.scalar(
        select(func.count()).where(
            Question.competition_id == competition_id, Question.gold_answer.is_not(None)
        )
    )
    warning = NOTHING_VETS if not has_gold else (NONE_VETTED if not vetted else None)
    return EarlyDecisionBasis(
        int(annotators), int(vetted), int(colluding), int(gold_answers), int(decided_early or 0), warning
    )
