"""Quality checks on an annotator's answers, pure: gold accuracy below the competition's threshold, a
streak far faster than their own median, a long run of one answer. Each returns why it fires, or None."""

from collections.abc import Sequence
from datetime import datetime
from statistics import median
from typing import NamedTuple

RUN_LENGTH = 25
"""This many answers in a row all the same (all "yes" or all "no") is flagged: the two questions of an image
are rarely both yes or both no (two classifiers predicted different labels)."""
FAST_STREAK = 10
"""This many answers in a row, each far faster than the annotator's median, are flagged."""
FAST_RATIO = 4.0
"""Far faster: in under a quarter of the annotator's median seconds."""
FAST_BASELINE = 20
"""The median is taken over at least this many of the annotator's earlier timed answers."""
WINDOW = RUN_LENGTH + FAST_STREAK + 2 * FAST_BASELINE
"""Latest votes one submission's checks read."""


class RecentVote(NamedTuple):
    """One of the annotator's latest votes: their answer, its seconds (None if not sent) and when."""

    answer: bool
    seconds: float | None
    created_at: datetime


def gold_shortfall(answered: int, correct: int, threshold: float, min_answers: int) -> str | None:
    """Why the annotator is paused: `correct / answered < threshold` once `answered >= min_answers`."""
    if answered < min_answers or correct >= threshold * answered:
        return None
    return (
        f"{correct} of your last {answered} answers to check questions with known answers were right "
        f"({correct / answered:.0%}); this competition asks for {threshold:.0%}"
    )


def long_run(newest_first: Sequence[RecentVote], since: datetime | None) -> str | None:
    """The latest RUN_LENGTH answers (all after `since`, the last such flag) are all the same answer."""
    latest = _after(newest_first, since)[:RUN_LENGTH]
    if len(latest) < RUN_LENGTH or len({vote.answer for vote in latest}) != 1:
        return None
    return f'{RUN_LENGTH} answers in a row were all "{"yes" if latest[0].answer else "no"}"'


def fast_streak(newest_first: Sequence[RecentVote], since: datetime | None) -> str | None:
    """The latest FAST_STREAK timed answers (after `since`) each took under median / FAST_RATIO seconds, the
    median of the annotator's FAST_BASELINE or more timed answers before them."""
    timed = [(vote, vote.seconds) for vote in newest_first if vote.seconds is not None]
    streak, earlier = timed[:FAST_STREAK], [seconds for _, seconds in timed[FAST_STREAK:]]
    if len(_after([vote for vote, _ in streak], since)) < FAST_STREAK or len(earlier) < FAST_BASELINE:
        return None
    typical = median(earlier)
    if not all(seconds < typical / FAST_RATIO for _, seconds in streak):
        return None
    slowest = max(seconds for _, seconds in streak)
    return (
        f"{FAST_STREAK} answers in a row took at most {slowest:.1f} s each; "
        f"this annotator's median is {typical:.1f} s"
    )


def _after(newest_first: Sequence[RecentVote], since: datetime | None) -> list[RecentVote]:
    """The votes cast after `since` (all when None)."""
    return [vote for vote in newest_first if since is None or vote.created_at > since]
