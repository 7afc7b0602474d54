"""The vote rules of paper Sec. 3.1, as pure functions of vote and flag counts (and of questions holding
them).

`early`: under active sampling, what decides a question before a strict majority (a dynamic panel,
app.core.active.decided_early): unanimous votes of vetted annotators whose evidence (the Σ of their weights,
a question's early_evidence) reaches the EarlyRule's bar for their answer; None keeps the paper's rule.
"""

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from app.core.active import DEFAULT_EARLY_CONFIDENCE

UNDO_LIMIT = 10
"""Only the ten most recent answers stay editable."""


def majority(panel_size: int) -> int:
    """Concordant votes that decide a question: a strict majority of the panel (3 of 5, paper Sec. 3.1)."""
    return panel_size // 2 + 1


@dataclass(frozen=True)
class EarlyRule:
    """The vetted evidence E = Σ log(r / (1 − r)) that decides a unanimous "yes" or "no" early: the posterior
    odds π/(1 − π)·e^E (or (1 − π)/π·e^E) reach c/(1 − c) for the confidence c (app.core.active.decided_early,
    base rate π)."""

    yes_evidence: float
    no_evidence: float

    @classmethod
    def of(cls, yes_share: float, confidence: float = DEFAULT_EARLY_CONFIDENCE) -> "EarlyRule":
        """The bars for base rate π = yes_share: E ≥ logit(c) − logit(π) for "yes", logit(c) + logit(π) for
        "no"."""
        bar, prior = _logit(confidence), _logit(yes_share)
        return cls(bar - prior, bar + prior)


def _logit(p: float) -> float:
    """log(p / (1 − p))."""
    return math.log(p / (1 - p))


def outcome(
    yes_votes: int,
    no_votes: int,
    panel_size: int,
    early: EarlyRule | None = None,
    evidence: float | None = None,
) -> bool | None:
    """True or False once one answer has a strict majority of the panel and more votes than the other, or
    (dynamic panel) at least 2 votes, the other none, and vetted `evidence` up to the `early` bar."""
    needed = majority(panel_size)
    if yes_votes >= needed and yes_votes > no_votes:
        return True
    if no_votes >= needed and no_votes > yes_votes:
        return False
    if early is None or evidence is None or min(yes_votes, no_votes) > 0 or yes_votes + no_votes < 2:
        return None
    if yes_votes > 0:
        return True if evidence >= early.yes_evidence else None
    return False if evidence >= early.no_evidence else None


def votes_still_needed(
    yes_votes: int,
    no_votes: int,
    panel_size: int,
    early: EarlyRule | None = None,
    evidence: float | None = None,
) -> int:
    """The fewest further votes that could decide an open question (at least 1; ties need a tie-break): to a
    strict majority, or, while none disagrees and every voter is vetted (`evidence` known), to the 2 vetted
    votes an early decision needs at least."""
    to_decide = majority(panel_size)
    if early is not None and evidence is not None and min(yes_votes, no_votes) == 0:
        to_decide = min(to_decide, 2)
    return max(1, to_decide - max(yes_votes, no_votes))


def split(yes_votes: int, no_votes: int, panel_size: int) -> bool:
    """Decided by the narrowest majority: the minority has a majority less one vote (3–2 of 5, 2–1 of 3)."""
    return min(yes_votes, no_votes) >= max(1, majority(panel_size) - 1)


def too_difficult(flags: int, panel_size: int) -> bool:
    """More than 60% of the panel find the image too difficult: "more than three of five" (paper Sec. 3.1)."""
    return flags * 5 > panel_size * 3


class VoteCounts(Protocol):
    """A question's counted votes and decision, as the rules below read and set them."""

    yes_votes: int
    no_votes: int
    early_evidence: float | None
    outcome: bool | None
    decided_at: datetime | None
    gold_answer: bool | None
    adjudicated: bool


def _votes_needed_by_open_questions(
    questions: Iterable[VoteCounts], panel_size: int, early: EarlyRule | None
) -> Iterator[int]:
    """votes_still_needed of each open regular question (gold questions are decided by their answer)."""
    for q in questions:
        if q.outcome is None and q.gold_answer is None:
            yield votes_still_needed(q.yes_votes, q.no_votes, panel_size, early, q.early_evidence)


def needed(
    discarded: bool, questions: Iterable[VoteCounts], panel_size: int, early: EarlyRule | None = None
) -> int:
    """Votes an item still needs before it leaves the queue: the nearest decision among its open questions."""
    if discarded:
        return 0
    return min(_votes_needed_by_open_questions(questions, panel_size, early), default=0)


def annotators_to_decide(
    questions: Iterable[VoteCounts], panel_size: int, early: EarlyRule | None = None
) -> int:
    """More annotators who must answer an image before all its questions are decided: each answers them
    all, so the open question that needs the most votes sets it (0 when every question is decided)."""
    return max(_votes_needed_by_open_questions(questions, panel_size, early), default=0)


def with_vote(evidence: float | None, weight: float | None) -> float | None:
    """A question's early_evidence once a vote of this weight is counted: the sum while every voter is
    vetted, None (for good) once one is not."""
    return None if evidence is None or weight is None else evidence + weight


def count_vote(
    question: VoteCounts,
    answer: bool,
    step: int,
    panel_size: int,
    now: datetime,
    early: EarlyRule | None = None,
    weight: float | None = None,
) -> None:
    """Add (step=+1) a counted vote carrying `weight`, or take one back (step=-1; the caller sets the
    early_evidence of the votes that stay), and re-decide the question."""
    if answer:
        question.yes_votes += step
    else:
        question.no_votes += step
    if step > 0:
        question.early_evidence = with_vote(question.early_evidence, weight)
    decide(question, panel_size, now, early)


def decide(question: VoteCounts, panel_size: int, now: datetime, early: EarlyRule | None = None) -> bool:
    """Set a regular question's outcome from its counted votes and their evidence; decided_at keeps the first
    decision time. An adjudicated question keeps the admin's outcome. Whether it is decided anew (an outcome
    it did not have: a decision for the active policy's tally, items.decide_questions)."""
    if question.adjudicated:
        return False
    decision = outcome(question.yes_votes, question.no_votes, panel_size, early, question.early_evidence)
    if decision == question.outcome:
        return False
    question.outcome = decision
    question.decided_at = None if decision is None else now
    return decision is not None
