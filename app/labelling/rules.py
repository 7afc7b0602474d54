"""The vote rules of paper Sec. 3.1, as pure functions of vote and flag counts (and of questions holding
them)."""

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Protocol

UNDO_LIMIT = 10
"""Only the ten most recent answers stay editable."""


def majority(panel_size: int) -> int:
    """Concordant votes that decide a question: a strict majority of the panel (3 of 5, paper Sec. 3.1)."""
    return panel_size // 2 + 1


def outcome(yes_votes: int, no_votes: int, panel_size: int) -> bool | None:
    """True or False once one answer has a strict majority of the panel and more votes than the other."""
    needed = majority(panel_size)
    if yes_votes >= needed and yes_votes > no_votes:
        return True
    if no_votes >= needed and no_votes > yes_votes:
        return False
    return None


def votes_still_needed(yes_votes: int, no_votes: int, panel_size: int) -> int:
    """The fewest further votes that could decide an open question (at least 1; ties need a tie-break)."""
    return max(1, majority(panel_size) - max(yes_votes, no_votes))


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


def _votes_needed_by_open_questions(questions: Iterable[VoteCounts], panel_size: int) -> Iterator[int]:
    """votes_still_needed of each open regular question (gold questions are decided by their answer)."""
    for q in questions:
        if q.outcome is None and q.gold_answer is None:
            yield votes_still_needed(q.yes_votes, q.no_votes, panel_size)


def needed(discarded: bool, questions: Iterable[VoteCounts], panel_size: int) -> int:
    """Votes an item still needs before it leaves the queue: the nearest decision among its open questions."""
    if discarded:
        return 0
    return min(_votes_needed_by_open_questions(questions, panel_size), default=0)


def annotators_to_decide(questions: Iterable[VoteCounts], panel_size: int) -> int:
    """More annotators who must answer an image before all its questions are decided: each answers them
    all, so the open question that needs the most votes sets it (0 when every question is decided)."""
    return max(_votes_needed_by_open_questions(questions, panel_size), default=0)


def count_vote(question: VoteCounts, answer: bool, step: int, panel_size: int, now: datetime) -> None:
    """Add (step=+1) or take back (step=-1) a counted vote and re-decide the question by majority."""
    if answer:
        question.yes_votes += step
    else:
        question.no_votes += step
    decide(question, panel_size, now)


def decide(question: VoteCounts, panel_size: int, now: datetime) -> None:
    """Set a regular question's outcome from its counted votes; decided_at keeps the first decision time. An
    adjudicated question keeps the admin's outcome."""
    if question.adjudicated:
        return
    decision = outcome(question.yes_votes, question.no_votes, panel_size)
    if decision != question.outcome:
        question.outcome = decision
        question.decided_at = None if decision is None else now
