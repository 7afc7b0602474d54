"""What labelling cost under active sampling (issue 24; docs/architecture.md, Active sampling): the votes
spent on regular questions, and the paper's full design's estimate beside them."""

from dataclasses import dataclass

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from app.labelling import rules
from app.labelling.active_sampling.reads import Pace
from app.labelling.models import LabelItem, Question, Vote

FULL_DESIGN = (
    "every selected image's questions each labelled to a strict majority of the panel: the fewest votes the "
    "paper's protocol spends (disagreements cost it more), so the share of it shown is an upper bound"
)
"""How the full design's votes are estimated (shown beside them)."""


@dataclass(frozen=True)
class ActiveCost:
    """Votes spent on regular questions, and the full design's (FULL_DESIGN)."""

    votes_used: int
    full_design_votes: int


QUESTIONS_AT_ONCE = 5_000
"""Question ids one statement of a paced full_design_votes counts (a range of the questions' primary key):
1-3 ms each at 100,000 questions. Joined to the label items for their discards, each such statement scanned
every item (30-36 ms, 21 of them a rerun); counting every vote too, a rerun spent 0.5-0.65 s of one Postgres
backend on a figure nobody read (README, Development)."""


def active_cost(db_session: Session, competition_id: int, panel_size: int) -> ActiveCost:
    """Votes stored on the competition's regular questions (every annotator's: what labelling cost), counted
    in one statement, and full_design_votes, unpaced."""
    votes_used = db_session.scalar(_votes_used(competition_id)) or 0
    return ActiveCost(votes_used, full_design_votes(db_session, competition_id, panel_size, Pace(0.0)))


def full_design_votes(db_session: Session, competition_id: int, panel_size: int, pace: Pace) -> int:
    """FULL_DESIGN's estimate: (the competition's regular questions − those on discarded images) × a strict
    majority of the panel; the questions counted QUESTIONS_AT_ONCE ids per statement, pacing after each
    (unpaced: all at once), then those on discarded images in one (which need no vote, needed 0)."""
    first, last = db_session.execute(
        select(func.min(Question.id), func.max(Question.id)).where(Question.competition_id == competition_id)
    ).one()
    if first is None:
        return 0
    at_once = QUESTIONS_AT_ONCE if pace.factor else last - first + 1
    questions = 0
    for low in range(first, last + 1, at_once):
        in_range = Question.id.between(low, low + at_once - 1)
        questions += db_session.scalar(_regular_questions(competition_id).where(in_range)) or 0
        pace.pause()
    discarded = db_session.scalar(
        _regular_questions(competition_id).where(Question.image_id.in_(_discarded(competition_id)))
    )
    return (questions - (discarded or 0)) * rules.majority(panel_size)


def _votes_used(competition_id: int) -> Select:
    """SELECT the count of votes on the competition's regular questions."""
    return (
        select(func.count())
        .select_from(Vote)
        .join(Question, Question.id == Vote.question_id)
        .where(Vote.competition_id == competition_id, Question.gold_answer.is_(None))
    )


def _regular_questions(competition_id: int) -> Select:
    """SELECT the count of the competition's regular questions."""
    return (
        select(func.count())
        .select_from(Question)
        .where(Question.competition_id == competition_id, Question.gold_answer.is_(None))
    )


def _discarded(competition_id: int) -> Select:
    """SELECT the images the competition discarded (a discarded item needs no vote: needed 0)."""
    return select(LabelItem.image_id).where(
        LabelItem.competition_id == competition_id, LabelItem.needed == 0, LabelItem.discarded
    )
