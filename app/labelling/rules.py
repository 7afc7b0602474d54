"""The vote rules of paper Sec. 3.1, as pure functions of vote and flag counts (and of questions holding
them).

`early`: under active sampling, the agreeing votes that decide a question before a strict majority when none
disagrees (a dynamic panel, app.core.active.decided_early; see early_agreement); None keeps the paper's rule.
"""

from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import cache
from typing import Protocol

from app.core.active import decided_early

UNDO_LIMIT = 10
"""Only the ten most recent answers stay editable."""


def majority(panel_size: int) -> int:
    """Concordant votes that decide a question: a strict majority of the panel (3 of 5, paper Sec. 3.1)."""
    return panel_size // 2 + 1


@cache
def early_agreement(panel_size: int, reliability: float) -> int | None:
    """The fewest agreeing votes, none disagreeing, that decided_early (app.core.active) decides on, when
    fewer than a strict majority; None when only the majority can decide."""
    for votes in range(2, majority(panel_size)):
        if decided_early(votes, 0, panel_size, reliability) is not None:
            return votes
    return None


def outcome(yes_votes: int, no_votes: int, panel_size: int, early: int | None = None) -> bool | None:
    """True or False once one answer has a strict majority of the panel and more votes than the other, or
    (dynamic panel) at least `early` votes and the other none."""
    needed = majority(panel_size)
    if yes_votes >= needed and yes_votes > no_votes:
        return True
    if no_votes >= needed and no_votes > yes_votes:
        return False
    if early is not None and min(yes_votes, no_votes) == 0 and max(yes_votes, no_votes) >= early:
        return yes_votes > 0
    return None


def votes_still_needed(yes_votes: int, no_votes: int, panel_size: int, early: int | None = None) -> int:
    """The fewest further votes that could decide an open question (at least 1; ties need a tie-break): to a
    strict majority, or to `early` agreeing votes while none disagrees."""
    to_decide = majority(panel_size)
    if early is not None and min(yes_votes, no_votes) == 0:
        to_decide = min(to_decide, early)
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
    outcome: bool | None
    decided_at: datetime | None
    gold_answer: bool | None
    adjudicated: bool


def _votes_needed_by_open_questions(
    questions: Iterable[VoteCounts], panel_size: int, early: int | None
) -> Iterator[int]:
    """votes_still_needed of each open regular question (gold questions are decided by their answer)."""
    for q in questions:
        if q.outcome is None and q.gold_answer is None:
            yield votes_still_needed(q.yes_votes, q.no_votes, panel_size, early)


def needed(
    discarded: bool, questions: Iterable[VoteCounts], panel_size: int, early: int | None = None
) -> int:
    """Votes an item still needs before it leaves the queue: the nearest decision among its open questions."""
    if discarded:
        return 0
    return min(_votes_needed_by_open_questions(questions, panel_size, early), default=0)


def annotators_to_decide(questions: Iterable[VoteCounts], panel_size: int, early: int | None = None) -> int:
    """More annotators who must answer an image before all its questions are decided: each answers them
    all, so the open question that needs the most votes sets it (0 when every question is decided)."""
    return max(_votes_needed_by_open_questions(questions, panel_size, early), default=0)


def count_vote(
    question: VoteCounts, answer: bool, step: int, panel_size: int, now: datetime, early: int | None = None
) -> None:
    """Add (step=+1) or take back (step=-1) a counted vote and re-decide the question by majority."""
    if answer:
        question.yes_votes += step
    else:
        question.no_votes += step
    decide(question, panel_size, now, early)


def decide(question: VoteCounts, panel_size: int, now: datetime, early: int | None = None) -> None:
    """Set a regular question's outcome from its counted votes; decided_at keeps the first decision time. An
    adjudicated question keeps the admin's outcome."""
    if question.adjudicated:
        return
    decision = outcome(question.yes_votes, question.no_votes, panel_size, early)
    if decision != question.outcome:
        question.outcome = decision
        question.decided_at = None if decision is None else now
