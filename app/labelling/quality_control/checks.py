"""Quality checks on an annotator's answers, pure: gold accuracy below the competition's threshold, a
streak far faster than their own median, a long run of one answer. Each returns why it fires, or None."""

from collections.abc import Sequence
from statistics import median
from typing import NamedTuple

from app.i18n import N_

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
    """One of the annotator's latest votes: their answer, its seconds (None if not sent), and whether it
    came after their last run flag and after their last speed flag (True when there is none)."""

    answer: bool
    seconds: float | None
    since_run_flag: bool
    since_fast_flag: bool


GOLD_SHORTFALL = N_(
    "{correct} of your last {answered} answers to check questions with known answers were right ({share}); "
    "this competition asks for {threshold}"
)
"""Why gold paused an annotator, as stored in English (the annotator reads it in their language)."""


def gold_shortfall(answered: int, correct: int, threshold: float, min_answers: int) -> str | None:
    """Why the annotator is paused: `correct / answered < threshold` once `answered >= min_answers`."""
    if answered < min_answers or correct >= threshold * answered:
        return None
    return GOLD_SHORTFALL.format(
        correct=correct, answered=answered, share=f"{correct / answered:.0%}", threshold=f"{threshold:.0%}"
    )


def long_run(newest_first: Sequence[RecentVote]) -> str | None:
    """The latest RUN_LENGTH answers (all after the last such flag) are all the same answer."""
    latest = [vote for vote in newest_first if vote.since_run_flag][:RUN_LENGTH]
    if len(latest) < RUN_LENGTH or len({vote.answer for vote in latest}) != 1:
        return None
    return f'{RUN_LENGTH} answers in a row were all "{"yes" if latest[0].answer else "no"}"'


def fast_streak(newest_first: Sequence[RecentVote]) -> str | None:
    """The latest FAST_STREAK timed answers (after the last such flag) each took under median / FAST_RATIO
    seconds, the median of the annotator's FAST_BASELINE or more timed answers before them."""
    timed = [(vote, vote.seconds) for vote in newest_first if vote.seconds is not None]
    streak, earlier = timed[:FAST_STREAK], [seconds for _, seconds in timed[FAST_STREAK:]]
    new_in_streak = sum(vote.since_fast_flag for vote, _ in streak)
    if new_in_streak < FAST_STREAK or len(earlier) < FAST_BASELINE:
        return None
    typical = median(earlier)
    if not all(seconds < typical / FAST_RATIO for _, seconds in streak):
        return None
    slowest = max(seconds for _, seconds in streak)
    return (
        f"{FAST_STREAK} answers in a row took at most {slowest:.1f} s each; "
        f"this annotator's median is {typical:.1f} s"
    )
